"""docs/tools.md, "How a tool ends": its httpx and requests examples (the ```py blocks) run
against a loopback server that refuses, resets, closes without answering, stays silent or
answers, and each ending becomes what the page's table says."""

from __future__ import annotations

import re
import socket
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from requests.adapters import HTTPAdapter

from runfacts.processors.dispatcher.adapters import ToolCompleted, ToolFailed, ToolRequest, ToolUnknown

DOC = Path(__file__).resolve().parents[3] / "docs" / "tools.md"


def _blocks() -> list[str]:
    return re.findall(r"```py\n(.*?)```", DOC.read_text(), re.S)


def _example(index: int) -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": f"doc_tools_endings_{index}"}
    exec(compile(_blocks()[index], str(DOC), "exec"), namespace)  # noqa: S102 - the documented example
    return namespace


@contextmanager
def _server(mode: str, status: int = 200, body: bytes = b"{}", headers: str = "") -> Iterator[int]:
    """A one-connection-at-a-time loopback server; yields its port ("refuse": a closed port)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    if mode == "refuse":
        listener.close()
        yield port
        return
    listener.listen(8)
    listener.settimeout(0.05)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(5)
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                head, _, rest = data.partition(b"\r\n\r\n")
                length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                while len(rest) < length:  # the whole body, so a close is a FIN, not a reset over unread bytes
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    rest += chunk
                if mode == "reset":  # RST after the request arrived
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                elif mode == "silent":
                    stop.wait(2)
                elif mode == "answer":
                    reason = {200: "OK", 402: "Payment Required", 429: "Too Many Requests",
                              500: "Internal Server Error"}[status]
                    conn.sendall(f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n{headers}"
                                 f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode() + body)
                # "close": closed without an answer

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield port
    finally:
        stop.set()
        thread.join(5)
        listener.close()


def _execute(namespace: dict[str, Any], capability: str, arguments: dict[str, Any]) -> Any:
    adapter = namespace["registry"].adapters()[capability]
    return adapter.execute(ToolRequest(tool_call_id="tc-1", capability_id=capability, idempotency_key="k-1",
                                       external_request_id="tc-1-a1", attempt=1, lease_epoch=1001,
                                       arguments=arguments))


def _httpx(port: int) -> dict[str, Any]:
    namespace = _example(0)
    namespace["client"] = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=httpx.Timeout(0.5, connect=0.5))
    return namespace


CHARGE = {"account": "acct-1", "amount_minor": 500}


def test_page_has_the_httpx_and_the_requests_example() -> None:
    blocks = _blocks()
    assert len(blocks) == 2 and "import httpx" in blocks[0] and "import requests" in blocks[1]


@pytest.mark.parametrize(("mode", "status", "expected"), [
    ("refuse", 200, ("failed", "transient", True)),  # httpx.ConnectError: declared, nothing sent
    ("reset", 200, ("unknown", "Error", None)),  # after sending (ReadError or RemoteProtocolError): may have charged
    ("close", 200, ("unknown", "RemoteProtocolError", None)),
    ("silent", 200, ("unknown", "ReadTimeout", None)),
    ("answer", 402, ("failed", "refused", False)),
    ("answer", 500, ("unknown", "HTTPStatusError", None)),
])
def test_httpx_example_ends_as_the_table_says(mode: str, status: int, expected: tuple[str, str, Any]) -> None:
    with _server(mode, status, b'{"error": "card declined"}') as port:
        outcome = _execute(_httpx(port), "payments.charge", CHARGE)
    kind, what, retryable = expected
    assert outcome.kind == kind, outcome
    if isinstance(outcome, ToolFailed):
        assert (outcome.error_class.value, outcome.retryable) == (what, retryable)
    else:
        assert isinstance(outcome, ToolUnknown) and what in outcome.reason


def test_httpx_example_completes_with_the_answer_when_the_provider_charges() -> None:
    with _server("answer", 200, b'{"charge_id": "ch_1"}') as port:
        outcome = _execute(_httpx(port), "payments.charge", CHARGE)
    assert isinstance(outcome, ToolCompleted) and outcome.result == '{"charge_id":"ch_1"}'


@pytest.mark.parametrize("mode", ["refuse", "reset", "close"])
def test_httpx_read_only_example_fails_retryably_whatever_the_transport_did(mode: str) -> None:
    with _server(mode) as port:
        outcome = _execute(_httpx(port), "payments.balance", {"account": "acct-1"})
    assert isinstance(outcome, ToolFailed) and (outcome.error_class.value, outcome.retryable) == ("transient", True)


class _Loopback(HTTPAdapter):
    """Sends the example's https://payments.example requests to the loopback server instead."""

    def __init__(self, port: int) -> None:
        super().__init__()
        self.port = port

    def send(self, request: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        request.url = re.sub(r"^https://payments\.example", f"http://127.0.0.1:{self.port}", request.url)
        return super().send(request, **kwargs)


@pytest.mark.parametrize(("mode", "status", "expected"), [
    ("refuse", 200, ("failed", "transient", True)),  # ConnectionError caused by NewConnectionError
    ("reset", 200, ("unknown", "ConnectionError", None)),
    ("close", 200, ("unknown", "ConnectionError", None)),
    ("answer", 402, ("failed", "refused", False)),
    ("answer", 200, ("completed", "", None)),
])
def test_requests_example_ends_as_the_table_says(mode: str, status: int, expected: tuple[str, str, Any]) -> None:
    namespace = _example(1)
    with _server(mode, status, b'{"refund_id": "re_1"}') as port:
        namespace["session"].mount("https://", _Loopback(port))
        outcome = _execute(namespace, "payments.refund", {"charge_id": "ch_1", "amount_minor": 500})
    kind, what, retryable = expected
    assert outcome.kind == kind, outcome
    if isinstance(outcome, ToolFailed):
        assert (outcome.error_class.value, outcome.retryable) == (what, retryable)
    elif isinstance(outcome, ToolUnknown):
        assert what in outcome.reason
    else:
        assert outcome.result == '{"refund_id":"re_1"}'


RATE_LIMITED = "retry-after: 2\r\n"


def test_httpx_example_is_rate_limited_for_the_retry_after_when_the_provider_answers_429() -> None:
    with _server("answer", 429, b'{"error": "slow down"}', RATE_LIMITED) as port:
        outcome = _execute(_httpx(port), "payments.charge", CHARGE)
    assert isinstance(outcome, ToolFailed), outcome
    assert (outcome.error_class.value, outcome.retryable, outcome.retry_after_ms) == ("rate_limited", True, 2_000)


def test_requests_example_is_rate_limited_for_the_retry_after_when_the_provider_answers_429() -> None:
    namespace = _example(1)
    with _server("answer", 429, b'{"error": "slow down"}', RATE_LIMITED) as port:
        namespace["session"].mount("https://", _Loopback(port))
        outcome = _execute(namespace, "payments.refund", {"charge_id": "ch_1", "amount_minor": 500})
    assert isinstance(outcome, ToolFailed), outcome
    assert (outcome.error_class.value, outcome.retryable, outcome.retry_after_ms) == ("rate_limited", True, 2_000)


def test_retry_after_reads_seconds_and_dates_and_ignores_what_it_cannot_read() -> None:
    from datetime import UTC, datetime

    from runfacts.tools import retry_after_ms

    now = datetime(2026, 12, 6, 6, 0, 0, tzinfo=UTC)
    assert retry_after_ms("2") == 2_000 and retry_after_ms(" 0 ") == 0
    assert retry_after_ms("Sun, 06 Dec 2026 06:00:30 GMT", now) == 30_000
    assert retry_after_ms("Sun, 06 Dec 2026 05:59:00 GMT", now) == 0  # in the past: at once
    assert retry_after_ms("Sun, 06 Dec 2026 06:00:30 GMT") is None  # a date, but no `now` given
    assert retry_after_ms(None) is None and retry_after_ms("soon") is None and retry_after_ms("-1") is None

"""The payment simulator's own contract: HTTP control plane, callbacks, ledger, process mode."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from runfacts.dev.provider.book import read_ledger
from runfacts.dev.provider.server import API_KEY_ENV, PaymentSimulator, SimSettings, api_key_from
from runfacts.schemas.errors import ConfigError

KEY = "sk_test_sim"
BODY = {"idempotencyKey": "refund:order-001:k1", "externalRequestId": "xr-1",
        "orderId": "order-001", "amountMinor": 1999, "currency": "EUR", "leaseEpoch": 1}


def call(url: str, method: str, path: str, body: Any = None, key: str | None = KEY
         ) -> tuple[int, dict[str, Any], dict[str, str]]:
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=3) as response:
            return response.status, json.loads(response.read()), dict(response.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read()), dict(exc.headers)


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[PaymentSimulator]:
    with PaymentSimulator(SimSettings(api_key=KEY, ledger_path=tmp_path / "ledger.jsonl")) as s:
        yield s


class _Receiver(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        with self.server.arrived:  # type: ignore[attr-defined]
            self.server.received.append(json.loads(body))  # type: ignore[attr-defined]
            self.server.arrived.notify_all()  # type: ignore[attr-defined]
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        return


@pytest.fixture
def receiver() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    server.received = []  # type: ignore[attr-defined]
    server.arrived = threading.Condition()  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def wait_for(server: ThreadingHTTPServer, total: int) -> list[dict[str, Any]]:
    """The callbacks received once `total` have arrived (5 s at most)."""
    with server.arrived:  # type: ignore[attr-defined]
        server.arrived.wait_for(lambda: len(server.received) >= total, timeout=5)  # type: ignore[attr-defined]
    return list(server.received)  # type: ignore[attr-defined]


def test_refund_is_unauthorized_when_api_key_is_missing_or_wrong(sim):
    assert call(sim.url, "POST", "/refunds", BODY, key=None)[0] == 401
    assert call(sim.url, "GET", "/refunds/by-request/xr-1", key="nope")[0] == 401
    assert sim.ledger() == []


@pytest.mark.parametrize(
    ("change", "field"),
    [({"currency": "eur"}, "currency"), ({"amountMinor": 0}, "amountMinor"),
     ({"leaseEpoch": "1"}, "leaseEpoch"), ({"surprise": 1}, "surprise")],
)
def test_refund_is_rejected_naming_field_when_body_is_invalid(sim, change, field):
    status, body, _ = call(sim.url, "POST", "/refunds", {**BODY, **change})
    assert (status, body["error"]) == (422, "invalid_request")
    assert field in body["detail"]
    assert sim.ledger() == []


def test_faults_are_set_over_http_and_rate_limit_sends_retry_after(sim):
    status, faults, _ = call(sim.url, "POST", "/_faults", {"rateLimitNext": 1, "retryAfterS": 7})
    assert (status, faults["rateLimitNext"], faults["retryAfterS"]) == (200, 1, 7)
    status, _, headers = call(sim.url, "POST", "/refunds", BODY)
    assert (status, headers["Retry-After"]) == (429, "7")
    assert call(sim.url, "POST", "/refunds", BODY)[0] == 201
    assert call(sim.url, "GET", "/_faults")[1]["rateLimitNext"] == 0


def test_faults_update_is_rejected_when_switch_is_unknown_or_invalid(sim):
    assert call(sim.url, "POST", "/_faults", {"explode": True})[0] == 422
    assert call(sim.url, "POST", "/_faults", {"errorStatus": 404})[0] == 422
    assert call(sim.url, "POST", "/_faults", [1])[0] == 422
    assert sim.faults.error_status == 500


def test_faults_reset_clears_every_switch(sim):
    sim.set_faults(error_next=3, pending=True, latency_ms=5)
    status, faults, _ = call(sim.url, "POST", "/_faults/reset", {})
    assert status == 200
    assert (faults["errorNext"], faults["pending"], faults["latencyMs"]) == (0, False, 0)


def test_ledger_endpoint_counts_executed_refunds_once_per_key(sim):
    for epoch in (1, 1, 2):
        call(sim.url, "POST", "/refunds", {**BODY, "leaseEpoch": epoch})
    call(sim.url, "POST", "/refunds", {**BODY, "idempotencyKey": "refund:order-002:k2",
                                       "externalRequestId": "xr-2", "orderId": "order-002"})
    status, ledger, _ = call(sim.url, "GET", "/_ledger")
    assert (status, ledger["count"]) == (200, 2)
    assert [r["orderId"] for r in ledger["refunds"]] == ["order-001", "order-002"]


def test_duplicate_callbacks_deliver_same_event_twice_when_switch_is_on(sim, receiver):
    host, port = receiver.server_address[:2]
    sim.set_faults(callback_url=f"http://{host}:{port}/callbacks", duplicate_callbacks=True,
                   pending=True)
    _, refund, _ = call(sim.url, "POST", "/refunds", BODY)
    first, second = wait_for(receiver, 2)
    assert first == second
    assert first["eventId"] == f"{refund['refundId']}:pending"
    status, _, _ = call(sim.url, "POST", "/_settle",
                        {"refundId": refund["refundId"], "outcome": "succeeded"})
    assert status == 200
    settled = wait_for(receiver, 4)[2:]
    assert [c["refund"]["status"] for c in settled] == ["succeeded", "succeeded"]


def test_single_callback_is_sent_when_duplicates_are_off(sim, receiver):
    host, port = receiver.server_address[:2]
    sim.set_faults(callback_url=f"http://{host}:{port}/cb")
    call(sim.url, "POST", "/refunds", BODY)
    call(sim.url, "POST", "/refunds", BODY)
    _, refund2, _ = call(sim.url, "POST", "/refunds", {**BODY, "idempotencyKey": "k2"})
    events = sorted(c["eventId"] for c in wait_for(receiver, 2))
    assert events == ["re_000001:succeeded", f"{refund2['refundId']}:succeeded"]


def test_settle_is_refused_when_refund_is_not_pending(sim):
    _, refund, _ = call(sim.url, "POST", "/refunds", BODY)
    status, body, _ = call(sim.url, "POST", "/_settle",
                           {"refundId": refund["refundId"], "outcome": "failed"})
    assert (status, body["error"]) == (409, "not_pending")
    assert call(sim.url, "POST", "/_settle", {"refundId": "re_x", "outcome": "failed"})[0] == 404


def test_cancel_endpoint_is_refused_when_refund_already_succeeded(sim):
    _, refund, _ = call(sim.url, "POST", "/refunds", BODY)
    status, body, _ = call(sim.url, "POST", f"/refunds/{refund['refundId']}/cancel", {})
    assert (status, body["error"]) == (409, "not_cancelable")


def test_get_refund_by_id_returns_refund_or_not_found(sim):
    _, refund, _ = call(sim.url, "POST", "/refunds", BODY)
    assert call(sim.url, "GET", f"/refunds/{refund['refundId']}")[1]["status"] == "succeeded"
    assert call(sim.url, "GET", "/refunds/re_missing")[0] == 404


def test_ledger_file_survives_restart_and_keeps_idempotency(tmp_path):
    ledger = tmp_path / "ledger.jsonl"
    with PaymentSimulator(SimSettings(api_key=KEY, ledger_path=ledger)) as first:
        _, refund, _ = call(first.url, "POST", "/refunds", {**BODY, "leaseEpoch": 4})
    with PaymentSimulator(SimSettings(api_key=KEY, ledger_path=ledger)) as second:
        status, again, _ = call(second.url, "POST", "/refunds", {**BODY, "leaseEpoch": 4})
        assert (status, again["refundId"], again["replayed"]) == (201, refund["refundId"], True)
        assert call(second.url, "POST", "/refunds", BODY)[1]["error"] == "stale_epoch"
    assert [r.refund_id for r in read_ledger(ledger)] == [refund["refundId"]]


def test_read_ledger_is_empty_when_file_does_not_exist(tmp_path):
    assert read_ledger(tmp_path / "none.jsonl") == []


def test_api_key_from_prefers_secret_file_and_names_setting_when_missing(tmp_path):
    secret = tmp_path / "key"
    secret.write_text(" from-file \n")
    assert api_key_from({API_KEY_ENV: "from-env"}, secret) == "from-file"
    assert api_key_from({API_KEY_ENV: "from-env"}, None) == "from-env"
    with pytest.raises(ConfigError, match=API_KEY_ENV):
        api_key_from({}, None)


def test_simulator_process_serves_and_persists_ledger_when_run_as_module(tmp_path):
    ledger = tmp_path / "proc-ledger.jsonl"
    env = {**os.environ, API_KEY_ENV: KEY}
    proc = subprocess.Popen(
        [sys.executable, "-m", "runfacts.dev.provider.server", "--port", "0",
         "--ledger", str(ledger)], env=env, stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        url = line.strip().rsplit(" ", 1)[-1]
        assert url.startswith("http://127.0.0.1:")
        assert call(url, "POST", "/refunds", BODY)[0] == 201
        assert call(url, "POST", "/refunds", BODY)[0] == 201
        assert len(read_ledger(ledger)) == 1
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0


def test_control_plane_answers_422_when_body_is_empty_and_400_when_json_is_broken(sim):
    empty = urllib.request.Request(sim.url + "/_faults", data=b"", method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(empty, timeout=3)
    assert refused.value.code == 422
    broken = urllib.request.Request(sim.url + "/refunds", data=b"{not json", method="POST",
                                    headers={"Authorization": f"Bearer {KEY}"})
    with pytest.raises(urllib.error.HTTPError) as bad_json:
        urllib.request.urlopen(broken, timeout=3)
    assert json.loads(bad_json.value.read())["error"] == "invalid_json"


def test_expired_idempotency_key_refunds_again_while_lookup_by_request_still_finds_first(sim):
    call(sim.url, "POST", "/_faults", {"keyTtlMs": 300})
    first = call(sim.url, "POST", "/refunds", BODY)
    again = call(sim.url, "POST", "/refunds", BODY | {"externalRequestId": "xr-2"})
    assert again[1]["replayed"] and again[1]["refundId"] == first[1]["refundId"]  # inside the TTL: deduped
    time.sleep(0.4)
    late = call(sim.url, "POST", "/refunds", BODY | {"externalRequestId": "xr-3"})
    assert late[0] == 201 and late[1]["refundId"] != first[1]["refundId"]  # the key was forgotten
    assert len(sim.ledger()) == 2
    found = call(sim.url, "GET", "/refunds/by-request/xr-1")
    assert found[0] == 200 and found[1]["refundId"] == first[1]["refundId"]

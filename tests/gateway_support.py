"""A real stack for the gateway's tests: the client's stack (decider, dispatcher, payment
simulator as `runfacts worker` subprocesses) with the decider checking every command's source
signature, and `runfacts gateway serve` as a subprocess holding the agent harness's and the
dashboard's source keys and the API keys below."""

from __future__ import annotations

import contextlib
import json
import os
import random
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from client_support import AgentStack

from runfacts.demo.stack import DemoOptions
from runfacts.processors.policy.keyring import ENV_SOURCE_KEYS
from runfacts.settings import KafkaSettings

KEYS = {
    "agent": {"secret": "agent-key-0123456789abcdef", "subjectId": "refund-agent", "roles": ["agent"],
              "source": "agent-harness"},
    "alice": {"secret": "alice-key-0123456789abcdef", "subjectId": "alice", "roles": ["support_agent"],
              "tenant": "acme", "source": "dashboard"},
    # the run's own user as a support agent: the request stands for them (docs/security.md, "Who counts as
    # a requester"); the harness that created the run is a service identity, never a requester
    "requester": {"secret": "requester-key-0123456789", "subjectId": "customer-42", "roles": ["support_agent"],
                  "tenant": "acme", "source": "dashboard"},
    "other-tenant": {"secret": "globex-key-0123456789abcd", "subjectId": "gina", "roles": ["support_agent"],
                     "tenant": "globex", "source": "dashboard"},
    # an agent service of another tenant: it may not write an acme run's output
    "globex-agent": {"secret": "globex-agent-key-0123456789", "subjectId": "globex-agent", "roles": ["agent"],
                     "tenant": "globex", "source": "agent-harness"},
}


def bearer(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[name]['secret']}"}


class GatewayStack(AgentStack):
    """The client's stack whose decider verifies source signatures (RUNFACTS_SOURCE_KEYS)."""

    def start(self, crash_at: str = "", memory: bool = False) -> None:  # type: ignore[override]
        self.dir.mkdir(parents=True, exist_ok=True)
        from runfacts.demo.stack import demo_manifest
        (self.dir / "capabilities.toml").write_text(demo_manifest(self.options.approval_ttl_ms))
        self._topics()
        self.provider_url = self._start_provider()
        self._spawn_worker("decider", ["--capabilities", str(self.dir / "capabilities.toml")],
                           **self.options.signing_env, **self.options.source_env())
        self.start_dispatcher(crash_at=crash_at)

    def gateway_env(self, port: int, **extra: str) -> dict[str, str]:
        return {**os.environ, "RUNFACTS_KAFKA_BOOTSTRAP_SERVERS": self.options.kafka.bootstrap_servers,
                "RUNFACTS_KAFKA_TOPIC_PREFIX": self.names.prefix, "RUNFACTS_ARGS_STORE": str(self.args_store),
                "RUNFACTS_GATEWAY_KEYS": json.dumps(KEYS), "RUNFACTS_GATEWAY_PORT": str(port),
                **self.options.signing_env,
                ENV_SOURCE_KEYS: self.options.source_env("agent-harness", "dashboard")[ENV_SOURCE_KEYS], **extra}


PIDS: dict[str, int] = {}
"""The gateway process serving each URL."""


def threads_of(url: str) -> int:
    """How many threads the gateway process at `url` runs now (librdkafka's included)."""
    status = Path(f"/proc/{PIDS[url]}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("Threads:")))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def gateway_process(stack: GatewayStack, **env: str) -> Iterator[str]:
    """`runfacts gateway serve` on a free port; yields its base URL once it answers."""
    port = free_port()
    log = (stack.dir / f"gateway-{port}.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "runfacts.cli", "gateway", "serve", "--port", str(port)],
                            env=stack.gateway_env(port, **env), stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    PIDS[url] = proc.pid
    try:
        deadline = time.monotonic() + 90
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"gateway exited {proc.returncode}: "
                                     f"{(stack.dir / f'gateway-{port}.log').read_text()[-3000:]}")
            try:
                if httpx.get(f"{url}/openapi.json", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError("gateway did not answer within 90s")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()


@contextmanager
def gateway_stack(bootstrap: str, workdir: Path, approval_ttl_ms: int = 600_000) -> Iterator[GatewayStack]:
    options = DemoOptions(prefix=f"gw-{uuid.uuid4().hex[:10]}", workdir=workdir, partitions=2,
                          approval_ttl_ms=approval_ttl_ms, kafka=KafkaSettings(bootstrap_servers=bootstrap))
    stack = GatewayStack(options)
    try:
        stack.start()
        yield stack
    finally:
        stack.stop()


def post(http: httpx.Client, path: str, body: Any, key: str = "agent", idem: str | None = None,
         **headers: str) -> httpx.Response:
    return http.post(path, json=body, headers={**bearer(key), "Idempotency-Key": idem or uuid.uuid4().hex,
                                               **headers})


def sse_events(lines: Iterator[str], limit: int) -> list[tuple[str, str, dict[str, Any]]]:
    """Up to `limit` SSE events (id, event, data) from a line iterator."""
    out: list[tuple[str, str, dict[str, Any]]] = []
    current: dict[str, str] = {}
    for line in lines:
        if line == "":
            if "data" in current:
                out.append((current.get("id", ""), current.get("event", "message"), json.loads(current["data"])))
                if len(out) >= limit:
                    return out
            current = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            current[name] = value[1:] if value.startswith(" ") else value
    return out


def run_positions(stack: GatewayStack, run_id: str) -> list[str]:
    """Every committed fact of the run, as `<partition>:<offset>`, read straight from the topic."""
    from runfacts.logread import read_to_end
    records = read_to_end(stack.options.kafka.bootstrap_servers, [stack.names.events])[stack.names.events]
    return [f"{r.partition}:{r.offset}" for r in records if r.key == run_id.encode()]


@dataclass
class Resumed:
    """What a reader got through forced disconnects."""

    ids: list[str] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    disconnects: int = 0
    timeouts: int = 0


def write_reasonings(url: str, run_id: str, count: int, pause_s: float = 0.0) -> None:
    """`count` reasonings on the run, one request each (a live writer for the streams' tests)."""
    with httpx.Client(base_url=url, timeout=60) as http:
        for i in range(count):
            answer = post(http, f"/runs/{run_id}/reasoning", {"conclusion": f"step {i}"})
            assert answer.status_code == 200, answer.text
            if pause_s:
                time.sleep(pause_s)


def read_through_disconnects(url: str, run_id: str, done: Callable[[], list[str] | None], disconnects: int,
                             seed: int = 7, key: str = "agent", deadline_s: float = 600) -> Resumed:
    """Read the run's event stream, dropping the connection after 1-4 events each time and
    reconnecting with Last-Event-ID (every 5th time: the `last_event_id` query parameter), at
    least `disconnects` times and until `done()` (the run's full list of positions, once the
    writer finished) is all read."""
    rng = random.Random(seed)
    got = Resumed()
    expected: list[str] | None = None
    deadline = time.monotonic() + deadline_s
    with httpx.Client(base_url=url, timeout=httpx.Timeout(30, read=3)) as http:
        while time.monotonic() < deadline:
            if expected is None:
                expected = done()
            if expected is not None and got.disconnects >= disconnects and len(got.ids) >= len(expected):
                return got
            headers, params = bearer(key), {}
            if got.ids and got.disconnects % 5 == 4:
                params["last_event_id"] = got.ids[-1]
            elif got.ids:
                headers["Last-Event-ID"] = got.ids[-1]
            try:
                with http.stream("GET", f"/runs/{run_id}/events", headers=headers, params=params) as answer:
                    assert answer.status_code == 200, answer.read()
                    for event_id, kind, _ in sse_events(answer.iter_lines(), rng.randint(1, 4)):
                        got.ids.append(event_id)
                        got.kinds.append(kind)
            except httpx.ReadTimeout:
                got.timeouts += 1  # nothing new yet: the same as a drop, reconnect after the last id
            got.disconnects += 1
    raise AssertionError(f"read {len(got.ids)} of {len(expected or [])} events in {deadline_s}s")


class DroppingProxy:
    """A TCP proxy in front of the gateway whose `drop()` cuts every open connection (what a
    flaky network or a restarted load balancer does to a browser's stream)."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream = upstream_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.open: list[socket.socket] = []
        self.drops = 0
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.upstream))
            with self._lock:
                self.open += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def drop(self) -> None:
        with self._lock:
            gone, self.open = self.open, []
            self.drops += 1
        for s in gone:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def close(self) -> None:
        self.listener.close()
        self.drop()

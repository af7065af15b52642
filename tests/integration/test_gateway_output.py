"""A run's partial output on the real broker (runfacts.client.output, the gateway's
`/runs/{id}/output`): a writer subprocess killed with kill -9 mid-stream and retried from the
start shows a reader (SSE through dropped connections, and `rf.read_output`) every chunk once
and in order, with no `done` chunk while it is stopped; only the run's agent may write it, on
every path (client and HTTP); an Idempotency-Key sent again writes nothing twice; a browser's
EventSource resumes it through dropped connections."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from gateway_support import KEYS, DroppingProxy, GatewayStack, bearer, gateway_process, gateway_stack, post, sse_events

from runfacts.client import OutputForbidden, Runfacts
from runfacts.client.output import read_output
from runfacts.schemas.common import Actor

pytestmark = pytest.mark.integration
CHUNKS = 20
WRITER = """
import sys, time
from runfacts.client import Runfacts
rf = Runfacts.connect()
out = rf.output(sys.argv[1], "answer")
for i in range(int(sys.argv[2])):
    out.write(f"token-{i} ")
    out.flush()
    print(i, flush=True)
    time.sleep(float(sys.argv[3]))
out.close()
print("closed", flush=True)
"""


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayStack]:
    with gateway_stack(kafka_bootstrap, tmp_path_factory.mktemp("gateway-output")) as running:
        yield running


@pytest.fixture(scope="module")
def url(stack: GatewayStack) -> Iterator[str]:
    with gateway_process(stack, RUNFACTS_GATEWAY_RATE_PER_S="1000", RUNFACTS_GATEWAY_BURST="1000") as base:
        yield base


@pytest.fixture(scope="module")
def rf(stack: GatewayStack) -> Iterator[Runfacts]:
    client = stack.client()
    yield client
    client.close()


def new_run(url: str, tenant: str | None = None) -> str:
    run_id = f"out-{uuid.uuid4().hex[:8]}"
    with httpx.Client(base_url=url, timeout=60) as http:
        body = {"runId": run_id, "goal": "ticket:T-1", "summary": "s", "userId": "u-1", "tenant": tenant}
        answer = post(http, "/runs", body)
        assert answer.status_code == 201, answer.text
        assert http.get(f"/runs/{run_id}/state", params={"min_version": 1}, headers=bearer("agent")).status_code == 200
    return run_id


def writer(stack: GatewayStack, run_id: str, count: int, pause_s: float) -> subprocess.Popen[str]:
    env = {**os.environ, **stack.env()}
    return subprocess.Popen([sys.executable, "-c", WRITER, run_id, str(count), str(pause_s)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def read_output_sse(url: str, run_id: str, per_connection: int, deadline_s: float = 120) -> tuple[list[dict[str, Any]],
                                                                                                  list[str], int]:
    """The run's output over SSE until its `done` chunk, dropping the connection after every
    `per_connection` events and resuming with Last-Event-ID: (chunks, ids, reconnects)."""
    chunks: list[dict[str, Any]] = []
    ids: list[str] = []
    reconnects = 0
    deadline = time.monotonic() + deadline_s
    with httpx.Client(base_url=url, timeout=httpx.Timeout(30, read=5)) as http:
        while time.monotonic() < deadline and not (chunks and chunks[-1]["done"]):
            headers = {**bearer("agent"), **({"Last-Event-ID": ids[-1]} if ids else {})}
            try:
                with http.stream("GET", f"/runs/{run_id}/output", headers=headers) as answer:
                    assert answer.status_code == 200, answer.read()
                    for event_id, kind, data in sse_events(answer.iter_lines(), per_connection):
                        assert kind == "output"
                        ids.append(event_id)
                        chunks.append(data)
                        if data["done"]:
                            break
            except httpx.ReadTimeout:
                pass
            reconnects += 1
    return chunks, ids, reconnects


def test_a_writer_killed_mid_stream_and_retried_shows_each_chunk_once_and_in_order(
        stack: GatewayStack, url: str, rf: Runfacts) -> None:
    run_id = new_run(url)
    first = writer(stack, run_id, CHUNKS, 0.15)
    assert first.stdout is not None
    for line in first.stdout:
        if line.strip() == "7":
            break  # 8 chunks on the topic
    first.send_signal(signal.SIGKILL)  # kill -9: no close, no `done`
    first.wait(10)
    stopped = rf.read_output(run_id)
    assert 8 <= len(stopped) < CHUNKS and not any(c.done for c in stopped)  # it stopped: no done chunk
    assert [c.seq for c in stopped] == list(range(len(stopped)))

    got: dict[str, Any] = {}
    reader = threading.Thread(target=lambda: got.update(zip(("chunks", "ids", "reconnects"),
                                                            read_output_sse(url, run_id, 3), strict=True)))
    reader.start()
    time.sleep(1)  # the reader has the first attempt's chunks before the retry sends them again
    retry = writer(stack, run_id, CHUNKS, 0.02)  # starts over from seq 0
    out, err = retry.communicate(timeout=120)
    assert retry.returncode == 0 and "closed" in out, err
    reader.join(150)

    chunks = got["chunks"]
    assert [c["seq"] for c in chunks] == list(range(CHUNKS + 1))  # each once, in order, then done
    assert [c["text"] for c in chunks[:-1]] == [f"token-{i} " for i in range(CHUNKS)]
    assert chunks[-1]["done"] and chunks[-1]["status"] == "done" and chunks[-1]["writer"] == "agent-harness"
    assert got["reconnects"] >= CHUNKS // 3 and len(set(got["ids"])) == len(got["ids"])
    on_topic = read_output(stack.options.kafka, stack.names.output, run_id)
    assert [(c.seq, c.text) for c in on_topic] == [(c["seq"], c["text"]) for c in chunks]
    raw = [r for r in _records(stack) if r.key == run_id.encode()]
    assert len(raw) >= len(stopped) + CHUNKS + 1  # the retry did write the first chunks again


def _records(stack: GatewayStack) -> list[Any]:
    from runfacts.logread import read_to_end
    return read_to_end(stack.options.kafka.bootstrap_servers, [stack.names.output])[stack.names.output]


def test_only_the_runs_agent_may_write_its_output_on_every_path(stack: GatewayStack, url: str, rf: Runfacts) -> None:
    run_id = new_run(url, tenant="acme")
    browser = Actor(subjectId="alice", roles=("support_agent",), tenant="acme", authSource="dashboard")
    agent_as_browser = Actor(subjectId="mallory", roles=("agent",), tenant="acme", authSource="dashboard")
    other_tenant = Actor(subjectId="globex-agent", roles=("agent",), tenant="globex", authSource="agent-harness")
    for actor in (browser, agent_as_browser, other_tenant):
        with pytest.raises(OutputForbidden, match="may not write its output"):
            rf.output(run_id, actor=actor)
    with httpx.Client(base_url=url, timeout=60) as http:
        chunk = {"stream": "answer", "seq": 0, "text": "forged"}
        for key in ("alice", "requester", "other-tenant", "globex-agent"):
            answer = post(http, f"/runs/{run_id}/output", chunk, key=key)
            assert answer.status_code in (403, 404), (key, answer.text)
            if answer.status_code == 403:
                assert answer.json()["type"].endswith("output-forbidden") and answer.json()["field"] == "Authorization"
        assert rf.read_output(run_id) == []  # nothing was written
        written = post(http, f"/runs/{run_id}/output", {"seq": 0, "text": "mine"}, idem=f"o-{run_id}")
        again = post(http, f"/runs/{run_id}/output", {"seq": 0, "text": "mine"}, idem=f"o-{run_id}")
        assert written.status_code == again.status_code == 200, written.text
        assert written.json() == {"runId": run_id, "stream": "answer", "seq": 0, "chunkId": f"{run_id}/answer/0"}
        assert again.headers.get("Idempotent-Replayed") == "true"
    assert len([r for r in _records(stack) if r.key == run_id.encode()]) == 1  # written once
    with rf.output(run_id, resume=True) as out:  # the run's own agent: continues after seq 0
        assert out.written == 0
        out.write("and more")
    assert [(c.seq, c.text, c.done) for c in rf.read_output(run_id)] == [(0, "mine", False), (1, "and more", False),
                                                                        (2, "", True)]

    async def progress() -> None:  # the awaitable twin; a block that raises closes the stream as failed
        with pytest.raises(RuntimeError):
            async with await rf.output_async(run_id, "progress") as out:
                await out.write("50%")
                raise RuntimeError("the model call failed")

    asyncio.run(progress())
    assert [(c.seq, c.text, c.done, c.status) for c in rf.read_output(run_id) if c.stream == "progress"] == [
        (0, "50%", False, None), (1, "", True, "failed")]


def test_a_browser_eventsource_reads_the_output_through_dropped_connections_once_each(
        stack: GatewayStack, url: str, rf: Runfacts) -> None:
    from dashboard_support import browser_page

    run_id = new_run(url)
    proxy = DroppingProxy(int(url.rsplit(":", 1)[1]))
    base = f"http://127.0.0.1:{proxy.port}"

    def write() -> None:
        out = rf.output(run_id, "answer")
        for i in range(24):
            out.write(f"t{i}")
            out.flush()
            time.sleep(0.25)
            if i == 11:  # a retry from the start: the first 12 chunks again
                out = rf.output(run_id, "answer")
                for j in range(12):
                    out.write(f"t{j}")
                out.seq = 12
        out.close()

    writing = threading.Thread(target=write)
    try:
        with browser_page() as page:
            page.goto(f"{base}/openapi.json")  # the gateway's origin: the stream is same-origin
            page.evaluate("""([run, key]) => {
                window.got = []; window.errors = 0;
                const source = new EventSource(`/runs/${run}/output?access_token=${key}`);
                source.addEventListener("output", (e) => {
                    const chunk = JSON.parse(e.data);
                    window.got.push([e.lastEventId, chunk.seq, chunk.text, chunk.done]);
                    if (chunk.done) source.close();
                });
                source.onerror = () => { window.errors += 1; };
            }""", [run_id, KEYS["agent"]["secret"]])
            writing.start()
            for drop in range(3):  # cut the browser's connection while chunks keep coming
                page.wait_for_function(f"window.got.length > {3 + 5 * drop}", timeout=60_000)
                proxy.drop()
                page.wait_for_function(f"window.errors > {drop}", timeout=30_000)  # the browser saw it
            writing.join()
            page.wait_for_function("window.got.length && window.got[window.got.length - 1][3]", timeout=60_000)
            page.wait_for_timeout(1000)  # nothing more (a duplicate) arrives
            got, errors = page.evaluate("[window.got, window.errors]")
    finally:
        proxy.close()
    assert errors >= 3 and proxy.drops >= 3  # each drop seen, and the browser reconnected by itself
    assert [(seq, text) for _, seq, text, _ in got] == [(i, f"t{i}") for i in range(24)] + [(24, "")]
    assert got[-1][3] and len({event_id for event_id, *_ in got}) == len(got)


def test_an_output_stream_of_a_run_with_no_output_yet_follows_at_once(stack: GatewayStack) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    from runfacts.client.output import Chunk, OutputProducer
    from runfacts.gateway.streams import RunStream, StreamSettings, TopicHub, decode_output, output_filter

    topic = f"{stack.names.prefix}.empty-output-{uuid.uuid4().hex[:6]}"  # no record on any partition
    admin = AdminClient(stack.options.kafka.client_config())
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    run_id = f"out-{uuid.uuid4().hex[:8]}"

    async def first_chunk() -> tuple[bytes, float]:
        hub = TopicHub(stack.options.kafka, topic, decode_output)
        await asyncio.to_thread(hub.start)
        stream = RunStream(hub, run_id, StreamSettings(heartbeat_s=1.0), output_filter())
        stream.open(None)
        stream.start(asyncio.get_running_loop())
        producer = OutputProducer(stack.options.kafka, topic)
        started = time.monotonic()
        producer.send(Chunk(run_id, "answer", 0, "hello"))
        producer.flush()
        try:
            async with asyncio.timeout(20):
                async for frame in stream.frames():
                    if frame.startswith(b"id: "):
                        return frame, time.monotonic() - started
        finally:
            producer.close()
            hub.close()
        raise AssertionError("the stream ended")

    frame, took = asyncio.run(first_chunk())
    assert b'"text":"hello"' in frame and took < 15, (frame, took)  # not after the 30 s catch-up timeout
    admin.delete_topics([topic])


def test_reads_of_a_runs_state_reuse_pooled_consumers(stack: GatewayStack, url: str) -> None:
    from runfacts.client.reader import ReaderSettings, StateReader

    run_id = new_run(url)
    reader = StateReader(stack.options.kafka, stack.names, ReaderSettings(component="client"))
    try:
        states = [reader.latest(run_id) for _ in range(20)]  # the gateway reads one per stream opened
    finally:
        reader.close()
    assert all(s is not None and s.runId == run_id for s in states)
    assert reader.consumers_made == 1  # was one consumer (threads, fetch buffers) per read

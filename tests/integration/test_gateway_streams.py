"""The gateway's live streams on the real broker: a run's facts as Server-Sent Events whose id
is the Kafka position; a reader whose connection drops every 1-4 events (while a writer keeps
adding facts) and reconnects with Last-Event-ID gets every fact exactly once, in log order
(benchmarks/gateway_bench.py does 1,000 disconnects); a reader that falls behind is dropped
with a retry hint, its memory bounded, and resumes; the rate limit answers 429."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest
from gateway_support import (
    KEYS,
    DroppingProxy,
    GatewayStack,
    bearer,
    gateway_process,
    gateway_stack,
    post,
    read_through_disconnects,
    run_positions,
    threads_of,
    write_reasonings,
)

from runfacts.client.reader import POOLED
from runfacts.gateway.streams import RunStream, StreamSettings, TopicHub, decode_event
from runfacts.schemas import events as ev
from runfacts.schemas.codec import Codec
from runfacts.schemas.common import EventBase

pytestmark = pytest.mark.integration
DISCONNECTS = 40
EVENT_TYPES = sorted(c.model_fields["eventType"].default for c in vars(ev).values()
                     if isinstance(c, type) and issubclass(c, EventBase) and c is not EventBase
                     and isinstance(c.model_fields.get("eventType") and c.model_fields["eventType"].default, str))


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayStack]:
    with gateway_stack(kafka_bootstrap, tmp_path_factory.mktemp("gateway-streams")) as running:
        yield running


@pytest.fixture(scope="module")
def url(stack: GatewayStack) -> Iterator[str]:
    with gateway_process(stack, RUNFACTS_GATEWAY_RATE_PER_S="1000", RUNFACTS_GATEWAY_BURST="1000") as base:
        yield base


def new_run(url: str) -> str:
    run_id = f"gw-{uuid.uuid4().hex[:8]}"
    with httpx.Client(base_url=url, timeout=60) as http:
        answer = post(http, "/runs", {"runId": run_id, "goal": "ticket:T-1", "summary": "s", "userId": "u-1"})
        assert answer.status_code == 201, answer.text
    return run_id


def test_a_reader_dropped_every_few_events_resumes_with_no_gap_and_no_duplicate(
        stack: GatewayStack, url: str) -> None:
    run_id = new_run(url)
    # one stream first: the hub (one consumer, one thread) and a pooled catch-up reader start once
    with httpx.stream("GET", f"{url}/runs/{run_id}/events", timeout=30,
                      headers={**bearer("agent"), "Accept": "text/event-stream"}) as first:
        assert any(line.startswith("id: ") for line in first.iter_lines())
    time.sleep(1)
    threads = threads_of(url)
    writer = threading.Thread(target=write_reasonings, args=(url, run_id, 60, 0.02))
    writer.start()
    got = read_through_disconnects(
        url, run_id, lambda: None if writer.is_alive() else run_positions(stack, run_id), DISCONNECTS)
    writer.join()
    expected = run_positions(stack, run_id)
    assert len(expected) >= 61  # run.created and a reasoning.recorded per request
    assert got.ids == expected  # every fact once, in log order: 0 lost, 0 duplicated
    assert got.disconnects >= DISCONNECTS and got.kinds.count("reasoning.recorded") == 60
    # 40 dropped streams left no consumer or thread behind; the run-state reader keeps up to POOLED
    # consumers (a few librdkafka threads each) between reads, made as the writer and readers needed them
    allowed = threads + 8 + 4 * POOLED
    deadline = time.monotonic() + 10
    while threads_of(url) > allowed and time.monotonic() < deadline:
        time.sleep(0.2)
    assert threads_of(url) <= allowed


def test_a_slow_reader_is_dropped_with_a_retry_hint_and_resumes_after_its_last_id(
        stack: GatewayStack, url: str) -> None:
    run_id = new_run(url)
    write_reasonings(url, run_id, 12)
    expected = run_positions(stack, run_id)

    async def read(after: tuple[int, int] | None) -> list[bytes]:
        hub = TopicHub(stack.options.kafka, stack.names.events, decode_event(Codec()))
        await asyncio.to_thread(hub.start)
        stream = RunStream(hub, run_id, StreamSettings(queue_max=3, heartbeat_s=1.0))
        stream.open(after)
        stream.start(asyncio.get_running_loop())
        await asyncio.sleep(3)  # the reader reads nothing meanwhile: the stream's hand-over fills up
        try:
            return [chunk async for chunk in stream.frames()]  # ends: it fell queue_max behind
        finally:
            hub.close()

    frames = asyncio.run(read(None))
    ids = [f.split(b"\n")[0][4:].decode() for f in frames if f.startswith(b"id: ")]
    assert ids == expected[:3]  # at most queue_max records waited for it
    assert frames[-1].startswith(b": slow reader") and b"retry: " in frames[-1]
    part, offset = ids[-1].split(":")
    rest = asyncio.run(read((int(part), int(offset))))
    rest_ids = [f.split(b"\n")[0][4:].decode() for f in rest if f.startswith(b"id: ")]
    assert rest_ids == expected[3:6]  # resumes right after the last id it got


def test_the_view_streams_as_sse_and_json_answers_without_accept(stack: GatewayStack, url: str) -> None:
    run_id = new_run(url)
    with httpx.Client(base_url=url, timeout=httpx.Timeout(30, read=20)) as http:
        as_json = http.get(f"/runs/{run_id}/view", params={"min_version": 1}, headers=bearer("agent"))
        assert as_json.status_code == 200 and as_json.json()["version"] >= 1, as_json.text
        with http.stream("GET", f"/runs/{run_id}/view", headers={**bearer("agent"),
                                                                 "Accept": "text/event-stream"}) as answer:
            assert answer.headers["content-type"].startswith("text/event-stream")
            lines = answer.iter_lines()
            first = [next(lines) for _ in range(6)]
    assert any(line.startswith("event: view") for line in first), first
    assert any(line.startswith("id: ") for line in first)


def test_a_key_over_its_rate_gets_429_with_retry_after(stack: GatewayStack) -> None:
    with gateway_process(stack, RUNFACTS_GATEWAY_RATE_PER_S="0.5", RUNFACTS_GATEWAY_BURST="2") as base, \
            httpx.Client(base_url=base, timeout=30) as http:
        answers = [http.get("/approvals", headers=bearer("alice")) for _ in range(3)]
        assert [a.status_code for a in answers[:2]] == [200, 200]
        assert answers[2].status_code == 429 and int(answers[2].headers["Retry-After"]) >= 1
        assert answers[2].json()["type"].endswith("rate-limited")
        assert http.get("/approvals", headers=bearer("agent")).status_code == 200  # per key


def test_a_browser_eventsource_resumes_through_dropped_connections_without_gap_or_duplicate(
        stack: GatewayStack, url: str) -> None:
    from dashboard_support import browser_page

    run_id = new_run(url)
    proxy = DroppingProxy(int(url.rsplit(":", 1)[1]))
    base = f"http://127.0.0.1:{proxy.port}"
    writer = threading.Thread(target=write_reasonings, args=(url, run_id, 30, 0.05))
    try:
        with browser_page() as page:
            page.goto(f"{base}/openapi.json")  # the gateway's origin: the stream is same-origin
            page.evaluate("""([run, key, types]) => {
                window.got = []; window.errors = 0;
                const source = new EventSource(`/runs/${run}/events?access_token=${key}`);
                for (const type of types)  // each SSE event is named by its eventType
                    source.addEventListener(type, (e) => window.got.push(e.lastEventId));
                source.onerror = () => { window.errors += 1; window.state = source.readyState; };
                window.source = source;
            }""", [run_id, KEYS["agent"]["secret"], EVENT_TYPES])
            writer.start()
            for drop in range(3):  # cut the browser's connection while facts keep coming
                page.wait_for_function(f"window.got.length > {5 + 8 * drop}", timeout=60_000)
                proxy.drop()
            writer.join()
            expected = run_positions(stack, run_id)
            try:
                page.wait_for_function(f"window.got.length >= {len(expected)}", timeout=60_000)
            except Exception as exc:
                seen = page.evaluate("[window.got, window.errors, window.source.readyState]")
                raise AssertionError(f"browser: {seen}, expected {expected}") from exc
            page.wait_for_timeout(1500)  # nothing more (a duplicate) arrives
            got, errors = page.evaluate("[window.got, window.errors]")
    finally:
        proxy.close()
    assert errors >= 3 and proxy.drops >= 3  # the browser saw each drop and reconnected by itself
    assert got == expected  # with Last-Event-ID: no gap, no duplicate, in log order


def test_streams_opened_at_once_share_their_catch_up_reads_and_each_gets_exactly_its_range(
        stack: GatewayStack, url: str) -> None:
    """300 streams opened at once (a gateway restart: every dashboard reconnects) on 3 runs, half from
    the start and half after a Last-Event-ID, while a writer adds facts: the hub reads each partition a
    few times for all of them (not once per stream), and every stream gets exactly the run's facts
    after its position, in log order."""
    runs = [new_run(url) for _ in range(3)]
    for run_id in runs:
        write_reasonings(url, run_id, 4)
    before = {run_id: run_positions(stack, run_id) for run_id in runs}

    async def read() -> tuple[list[tuple[str, list[str]]], int]:
        hub = TopicHub(stack.options.kafka, stack.names.events, decode_event(Codec()))
        await asyncio.to_thread(hub.start)
        writer = threading.Thread(target=write_reasonings, args=(url, runs[0], 10, 0.02))
        writer.start()
        opened: list[tuple[str, RunStream, int]] = []
        for n in range(300):
            run_id = runs[n % 3]
            after = None if n % 2 else before[run_id][1 + n % 3]  # a position inside the run's past
            stream = RunStream(hub, run_id, StreamSettings(heartbeat_s=1.0))
            stream.open(None if after is None else (int(after.split(":")[0]), int(after.split(":")[1])))
            stream.start(asyncio.get_running_loop())
            opened.append((run_id, stream, 0 if after is None else before[run_id].index(after) + 1))
        await asyncio.to_thread(writer.join)
        expected = {run_id: run_positions(stack, run_id) for run_id in runs}

        async def ids(run_id: str, stream: RunStream, skip: int) -> list[str]:
            got: list[str] = []
            async for chunk in stream.frames():  # ends only on a keep-alive after the last expected
                if chunk.startswith(b"id: "):
                    got.append(chunk.split(b"\n")[0][4:].decode())
                elif chunk.startswith(b": keep-alive") and len(got) >= len(expected[run_id]) - skip:
                    break  # a second of nothing more: no duplicate follows
            return got
        try:
            async with asyncio.timeout(120):
                got = await asyncio.gather(*(ids(*one) for one in opened))
        finally:
            hub.close()
        return [(expected[run_id][skip:], ids) for (run_id, _s, skip), ids in zip(opened, got, strict=True)], \
            hub.reads

    streams, reads = asyncio.run(read())
    assert all(expected for expected, _got in streams)  # every stream had facts to get
    assert [got for _expected, got in streams] == [expected for expected, _got in streams]
    assert reads <= 10  # 300 streams, 2 partitions: a read serves every stream waiting on its partition

"""The gateway's resumable streams under forced disconnects: 0 lost, 0 duplicated.

Run: KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9092 .venv/bin/python benchmarks/gateway_bench.py \
        [--disconnects 1000] [--events 2500] [--writers 4]

1. starts the run decider (verifying every command's source signature) and the dispatcher on
   fresh topics, and `runfacts gateway serve` (tests/gateway_support.py, the integration
   tests' harness);
2. creates one run and has --writers threads record --events reasonings on it over HTTP
   (POST /runs/{id}/reasoning), while
3. one reader follows GET /runs/{id}/events, dropping the connection after 1-4 events every
   time and reconnecting with Last-Event-ID (every 5th time the last_event_id query
   parameter), at least --disconnects times and until it read everything;
4. compares what it read with the run's facts read straight from the topic (read_committed):
   lost = expected - read, duplicated = read - distinct, out of order = read != expected;
   reports the reconnect count, the time from reconnect to first event (p50/p99) is not
   separated: the total per reconnect is reported as elapsed / disconnects.
Exits 1 if anything was lost, duplicated or out of order.

With --streams N (e.g. 10000): N SSE streams held open at once on --stream-runs runs (raw
sockets from one asyncio process, each read to its first event), the gateway process's RSS
before and with them open (bar: 10,000 streams within 300 MB), then one fact written to each
run must reach every stream (the hub's fan-out). Exits 1 if one did not or the RSS is over.
Topics are deleted at the end.

First (--proposals N, default 100; 0 skips it), the gateway's overhead in the same run of the
stack: N proposals through the Python client (`run.propose`, one process-wide client) and N
through the gateway (POST /runs/{id}/calls from a kept-alive httpx client), alternating, each
timed from the call until the decider's answer (here approval.required) is back; reports p50
and p99 of both and the p50 difference (the issue's goal: <= 5 ms). Only propose -> answer is
measured: after the answer, the approval, the dispatch and the result take the same path
whoever proposed.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from gateway_support import (  # noqa: E402 - the integration tests' harness
    PIDS,
    GatewayStack,
    bearer,
    gateway_process,
    gateway_stack,
    post,
    read_through_disconnects,
    run_positions,
    write_reasonings,
)

from runfacts.client import ClientSettings, Runfacts, UiSettings  # noqa: E402
from runfacts.settings import KafkaSettings  # noqa: E402


def overhead(stack: GatewayStack, url: str, count: int) -> None:
    settings = ClientSettings(ui=UiSettings(signing_env=stack.options.signing_env))
    rf = Runfacts.connect(kafka=stack.options.kafka, prefix=stack.names.prefix, args_store=stack.args_store,
                          sources=stack.options.client_sources(), settings=settings)
    py_times: list[float] = []
    http_times: list[float] = []
    try:
        run = rf.start_run(goal="ticket:P-1", summary="s", user_id="u", tenant="acme")
        with httpx.Client(base_url=url, timeout=60) as http:
            http_run = f"bench-http-{uuid.uuid4().hex[:8]}"
            assert post(http, "/runs", {"runId": http_run, "goal": "ticket:P-2", "summary": "s", "userId": "u",
                                        "tenant": "acme"}).status_code == 201
            for i in range(count):
                args = {"orderId": f"o-{i}", "amountMinor": 100 + i, "currency": "EUR"}
                started = time.perf_counter()
                run.propose("payments.refund", args, target=f"o-{i}")
                py_times.append(time.perf_counter() - started)
                started = time.perf_counter()
                answer = post(http, f"/runs/{http_run}/calls", {"capability": "payments.refund",
                                                                 "target": f"o-{i}", "arguments": args})
                http_times.append(time.perf_counter() - started)
                assert answer.status_code == 200 and answer.json()["approvalId"], answer.text
    finally:
        rf.close()

    def ms(times: list[float], q: float) -> float:
        return 1000 * sorted(times)[min(len(times) - 1, int(q * len(times)))]

    print(f"propose -> answer over {count}: python client p50 {ms(py_times, 0.5):.1f} ms p99 "
          f"{ms(py_times, 0.99):.1f} ms; gateway p50 {ms(http_times, 0.5):.1f} ms p99 {ms(http_times, 0.99):.1f} ms; "
          f"gateway overhead at p50 {ms(http_times, 0.5) - ms(py_times, 0.5):+.1f} ms")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


async def open_streams(url: str, runs: list[str], count: int, auth: str) -> tuple[list[Any], float]:
    """`count` SSE connections spread over `runs`, each read until its first event (run.created)."""
    host, port = url.removeprefix("http://").split(":")
    sem = asyncio.Semaphore(200)  # connections being opened at once

    async def one(n: int) -> Any:
        async with sem:
            reader, writer = await asyncio.open_connection(host, int(port), limit=1 << 16)
            writer.write((f"GET /runs/{runs[n % len(runs)]}/events HTTP/1.1\r\nHost: {host}\r\n"
                          f"Authorization: {auth}\r\nAccept: text/event-stream\r\n\r\n").encode())
            await writer.drain()
            while b"event: run.created" not in await asyncio.wait_for(reader.readline(), 300):
                pass
            return reader, writer

    started = time.monotonic()
    opened = await asyncio.gather(*(one(n) for n in range(count)))
    return list(opened), time.monotonic() - started


async def fan_out(streams: list[Any], timeout: float) -> int:
    """How many streams received a reasoning.recorded (written after they were opened)."""
    async def wait(reader: Any) -> bool:
        try:
            while b"event: reasoning.recorded" not in await asyncio.wait_for(reader.readline(), timeout):
                pass
            return True
        except TimeoutError:
            return False
    return sum(await asyncio.gather(*(wait(reader) for reader, _writer in streams)))


def many_streams(stack: GatewayStack, url: str, count: int, runs: int) -> bool:
    """--streams: `count` open streams in one gateway process; its RSS; every one gets a new fact."""
    pid = PIDS[url]
    run_ids = [f"fan-{uuid.uuid4().hex[:8]}" for _ in range(runs)]
    with httpx.Client(base_url=url, timeout=60) as http:
        for run_id in run_ids:
            answer = post(http, "/runs", {"runId": run_id, "goal": "ticket:F-1", "summary": "s", "userId": "u"})
            assert answer.status_code == 201, answer.text
    before = rss_mb(pid)

    async def scenario() -> tuple[int, float, float]:
        streams, took = await open_streams(url, run_ids, count, bearer("agent")["Authorization"])
        held = rss_mb(pid)
        for run_id in run_ids:
            await asyncio.to_thread(write_reasonings, url, run_id, 1)
        got = await fan_out(streams, 120)
        for _reader, writer in streams:
            writer.close()
        return got, took, held

    got, took, held = asyncio.run(scenario())
    print(f"streams {count} on {runs} runs: opened in {took:.1f}s; gateway RSS {before:.0f} MB before, "
          f"{held:.0f} MB with them open (bar 300 MB: {'met' if held <= 300 else 'NOT met'}); "
          f"a fact written after: received by {got}/{count}")
    return got == count and held <= 300


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--disconnects", type=int, default=1000)
    parser.add_argument("--events", type=int, default=2500)
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--proposals", type=int, default=100)
    parser.add_argument("--streams", type=int, default=0, help="also hold this many SSE streams open (e.g. 10000)")
    parser.add_argument("--stream-runs", type=int, default=100)
    parser.add_argument("--gateway-env", nargs="*", default=[], metavar="NAME=VALUE",
                        help="extra environment of the gateway process (e.g. MALLOC_ARENA_MAX=2)")
    args = parser.parse_args()
    bootstrap = KafkaSettings().bootstrap_servers
    with tempfile.TemporaryDirectory() as tmp, gateway_stack(bootstrap, Path(tmp)) as stack, \
            gateway_process(stack, RUNFACTS_GATEWAY_RATE_PER_S="10000", RUNFACTS_GATEWAY_BURST="10000",
                            **dict(arg.split("=", 1) for arg in args.gateway_env)) as url:
        if args.proposals:
            overhead(stack, url, args.proposals)
        if args.streams and not many_streams(stack, url, args.streams, args.stream_runs):
            sys.exit(1)
        if not args.disconnects:
            return
        run_id = f"bench-{uuid.uuid4().hex[:8]}"
        with httpx.Client(base_url=url, timeout=60) as http:
            answer = post(http, "/runs", {"runId": run_id, "goal": "ticket:B-1", "summary": "s", "userId": "u"})
            assert answer.status_code == 201, answer.text
        share = [args.events // args.writers + (1 if i < args.events % args.writers else 0)
                 for i in range(args.writers)]
        writers = [threading.Thread(target=write_reasonings, args=(url, run_id, n)) for n in share]
        started = time.monotonic()
        for writer in writers:
            writer.start()
        got = read_through_disconnects(
            url, run_id, lambda: None if any(w.is_alive() for w in writers) else run_positions(stack, run_id),
            args.disconnects, deadline_s=3600)
        elapsed = time.monotonic() - started
        for writer in writers:
            writer.join()
        expected = run_positions(stack, run_id)
    lost = len(set(expected) - set(got.ids))
    duplicated = len(got.ids) - len(set(got.ids))
    in_order = got.ids == expected
    print(f"events {len(expected)}  read {len(got.ids)}  disconnects {got.disconnects} "
          f"(read timeouts among them {got.timeouts})  lost {lost}  duplicated {duplicated}  "
          f"in log order {in_order}  elapsed {elapsed:.1f}s ({1000 * elapsed / got.disconnects:.1f} ms a reconnect)")
    sys.exit(0 if lost == duplicated == 0 and in_order else 1)


if __name__ == "__main__":
    main()

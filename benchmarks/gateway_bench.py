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
Exits 1 if anything was lost, duplicated or out of order. Topics are deleted at the end.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from gateway_support import (  # noqa: E402 - the integration tests' harness
    gateway_process,
    gateway_stack,
    post,
    read_through_disconnects,
    run_positions,
    write_reasonings,
)

from runfacts.settings import KafkaSettings  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--disconnects", type=int, default=1000)
    parser.add_argument("--events", type=int, default=2500)
    parser.add_argument("--writers", type=int, default=4)
    args = parser.parse_args()
    bootstrap = KafkaSettings().bootstrap_servers
    with tempfile.TemporaryDirectory() as tmp, gateway_stack(bootstrap, Path(tmp)) as stack, \
            gateway_process(stack, RUNFACTS_GATEWAY_RATE_PER_S="10000", RUNFACTS_GATEWAY_BURST="10000") as url:
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

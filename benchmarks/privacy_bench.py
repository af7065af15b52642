"""What sealing personal fields costs the decider and the projector (ADR 0009), broker-free.

Run: .venv/bin/python benchmarks/privacy_bench.py [--runs 100] [--calls 10] [--rounds 5]

1. builds the decider benchmark's runs (`decider_load.run_commands`: CreateRun, then
   propose / claim / complete per call) and a sealed twin of each command, as the client
   writes it with privacy keys on (`runfacts.privacy.store.Protector`);
2. "decider": decode (trusted codec) + `decide_evolve` + encode the events + `dump_state`
   for every command, plain vs sealed;
3. "projector": the audit and user-view projections' per-record handlers (decode + fold +
   encode, as `replay_bench.py`'s core row) over the events each variant produced;
4. "dispatcher": the dispatcher shell over the events it is fed for `--runs` runs of
   `--calls` low-risk lookups each (`dispatcher_load`: recorded once through the real decider
   and dispatcher, then replayed into a fresh dispatcher per round; an instant in-memory tool
   whose result names the customer, so the shell's own work is all that is timed): plain vs
   sealing its claims and reports (`Protector` with the run's user as subject);
5. "client": `protect` per command, and `reveal_dict` per event (the readers' side).
After a warm-up of both, rounds interleave plain and sealed (alternating which goes first);
each prints the sealed/plain CPU-time ratio; the summary gives the median and the range over
the rounds (a shared machine: the range matters).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from decider_load import CTX, run_commands  # noqa: E402
from dispatcher_load import record, replay  # noqa: E402

from runfacts.privacy import KeyTable, parse_privacy_keys, reveal_dict  # noqa: E402
from runfacts.privacy.keys import new_privacy_keys_json  # noqa: E402
from runfacts.privacy.store import Protector  # noqa: E402
from runfacts.processors.decider.core import decide_evolve  # noqa: E402
from runfacts.processors.decider.state_json import dump_state  # noqa: E402
from runfacts.projections.projector.replay import projectors, relaxed_gc  # noqa: E402
from runfacts.schemas.codec import Codec, CodecSettings  # noqa: E402

TRUSTED = Codec(CodecSettings(validate=False))


def commands(runs: int, calls: int) -> list[Any]:
    t0 = datetime(2026, 12, 2, tzinfo=UTC)
    per_run = [run_commands(f"run-{r:05d}", calls, t0 + timedelta(seconds=r)) for r in range(runs)]
    return [c for i in range(max(map(len, per_run))) for cs in per_run if i < len(cs) for c in cs[i:i + 1]]


def decide_all(values: list[bytes]) -> tuple[float, list[bytes]]:
    """CPU seconds for the decider's work over `values`, and the events' bytes."""
    states: dict[str, Any] = {}
    out: list[bytes] = []
    start = time.process_time()
    with relaxed_gc():
        for value in values:
            command = TRUSTED.decode(value)
            events, state = decide_evolve(command, states.get(command.runId), CTX)
            states[command.runId] = state
            out += [TRUSTED.encode(e) for e in events]
            if state is not None:
                dump_state(state)
    return time.process_time() - start, out


def project_all(name: str, events: list[bytes]) -> float:
    projector = projectors()[name]()
    handle = projector.handler("bench.run.events", lambda *_a: None)
    start = time.process_time()
    with relaxed_gc():
        for offset, value in enumerate(events):
            handle(value, 0, offset)
        projector.finish(lambda *_a: None)
    return time.process_time() - start


def timed(once: Callable[[], Any]) -> float:
    start = time.process_time()
    once()
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    keys = parse_privacy_keys(new_privacy_keys_json("bench-kek"))
    table = KeyTable(keys, lambda _k, _v: None)
    protector = Protector(table)
    plain = commands(args.runs, args.calls)
    sealed = [protector(c) for c in plain]
    values = {"plain": [TRUSTED.encode(c) for c in plain], "sealed": [TRUSTED.encode(c) for c in sealed]}
    print(f"{len(plain)} commands over {args.runs} runs; bytes plain {sum(map(len, values['plain']))}, "
          f"sealed {sum(map(len, values['sealed']))}")
    ratios: dict[str, list[float]] = {"decider": [], "audit": [], "user-view": [], "dispatcher": []}
    fed = {"plain": record(args.runs, args.calls, None), "sealed": record(args.runs, args.calls, protector)}

    def sealer() -> Protector:  # a dispatcher that loaded the keys topic: the subjects' keys, nothing cached
        loaded = KeyTable(keys, lambda _k, _v: None)
        loaded.records.update(table.records)
        return Protector(loaded)
    reports = replay(fed["plain"], None)[1]
    print(f"dispatcher: {len(fed['plain'])} events in, {reports} commands out")
    view = table.view()
    for variant in ("plain", "sealed"):  # warm-up (caches, first calls), not counted
        project_all("user-view", decide_all(values[variant])[1])
    for r in range(args.rounds):
        cost: dict[str, dict[str, float]] = {}
        for variant in ("plain", "sealed") if r % 2 == 0 else ("sealed", "plain"):
            seconds, events = decide_all(values[variant])
            cost[variant] = {"decider": seconds, "audit": project_all("audit", events),
                             "user-view": project_all("user-view", events),
                             "dispatcher": replay(fed[variant], sealer() if variant == "sealed" else None)[0]}
        for what in ratios:
            ratios[what].append(cost["sealed"][what] / cost["plain"][what])
        per = {w: (reports, "report") if w == "dispatcher" else (len(plain), "command") for w in ratios}
        print(f"round {r + 1}: " + ", ".join(f"{w} {cost['plain'][w] * 1e6 / per[w][0]:.0f} -> "
                                             f"{cost['sealed'][w] * 1e6 / per[w][0]:.0f} µs/{per[w][1]}"
                                             for w in ratios))
    protect_s = timed(lambda: [Protector(KeyTable(keys, lambda _k, _v: None))(c) for c in plain[:2000]])
    _, events = decide_all(values["sealed"])
    decoded = [TRUSTED.decode(e) for e in events[:2000]]
    reveal_s = timed(lambda: [reveal_dict(e.model_dump(), e.eventType, view) for e in decoded])
    for what, rs in ratios.items():
        print(f"{what}: sealed/plain CPU time median {statistics.median(rs):.2f}x "
              f"(range {min(rs):.2f}-{max(rs):.2f}, {len(rs)} rounds)")
    print(f"client protect: {protect_s * 1e6 / min(2000, len(plain)):.0f} µs/command (keys created as met); "
          f"reader reveal_dict: {reveal_s * 1e6 / len(decoded):.0f} µs/event")


if __name__ == "__main__":
    main()

"""The least CPU a decider with runfacts' record contract pays per command, deciding nothing
(the retired bar of docs/decider.md "Against the floor loop": how close to the floor loop any
Python decider on this stack can get).

Per command the decider must, whatever its rules: read the Avro command and validate it with
pydantic (untrusted input), write each event as Avro single-object bytes with its headers, write
the run's state JSON (the authoritative run-state topic) and its user view, and move 1 + events +
2 records through Kafka. This script times the first four on `engine_bench`'s decider input with
the decider's own code (`DeciderShell.deserialize`, `DeciderCodec.encode`/`headers`,
`state_json.dump_state` reusing the previous state's parts as the shell does, the user view
publisher), each stage alone over every command, best of --rounds, the engine's GC tuning. The
commands are decided once beforehand (untimed) so that each stage sees the real events and states.

    .venv/bin/python benchmarks/decider_bound.py [--commands 12000] [--runs 300]
        [--floor-us-per-event 5.9 --floor-io-us 2.0]

With the floor loop's CPU-µs per event and its Kafka I/O share per event (engine_bench's floor
row: 1e6 / events-per-CPU-s, and its "overhead" column), it prints the highest share of the
floor's events per CPU-second such a decider could reach: the floor's µs per event x events per
command / the bound's µs per command. engine_bench.py prints the same line for the floor of its
own run (`bound_line`). The decision itself (decide + fold) and the engine's own work (stores,
timers, transactions) are timed for comparison and are not in the bound.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

sys.path.insert(0, str(Path(__file__).parent))
from decider_load import CTX, generate  # noqa: E402

from runfacts.processors.decider.app import DeciderShell  # noqa: E402
from runfacts.processors.decider.core import decide_evolve  # noqa: E402
from runfacts.processors.decider.state_json import dump_state  # noqa: E402
from runfacts.processors.engine.gctune import tune_gc  # noqa: E402
from runfacts.projections.user_view import publisher  # noqa: E402
from runfacts.topics import TopicNames  # noqa: E402

STAGES = ("read + validate", "encode events", "state JSON", "user view")
"""The stages every decider with this record contract pays, whatever it decides."""


SAMPLE_COMMANDS = 12_000
"""Commands timed by default (whole runs of the input: `whole_runs`)."""


class Item(NamedTuple):
    """One command, decided beforehand: what each stage is timed on."""

    value: bytes  # the record
    command: Any
    events: list[Any]
    before: Any  # the run's state before the command (None: no run yet)
    after: Any  # ...and after it
    parts: Any  # the JSON parts of the run's previous dump, as the shell reuses them


def _prepared(pairs: list[tuple[bytes, bytes]]) -> tuple[DeciderShell, list[Item]]:
    """The shell, and every command decided in order on its run's state."""
    names = TopicNames("bound")
    shell = DeciderShell(names, CTX, views=(publisher(names.user_view),))
    states: dict[str, Any] = {}
    parts: dict[str, Any] = {}
    out = []
    for _key, value in pairs:
        command = shell.deserialize(value)
        before, before_parts = states.get(command.runId), parts.get(command.runId)
        events, after = decide_evolve(command, before, CTX)
        if after is not None:
            parts[command.runId] = dump_state(after, before_parts)[1]
            states[command.runId] = after
        out.append(Item(value, command, events, before, after, before_parts))
    return shell, out


def whole_runs(pairs: list[tuple[bytes, bytes]], commands: int) -> list[tuple[bytes, bytes]]:
    """About `commands` of `pairs`: every command of the first runs (keys), so that the states
    grow through each run's whole history as in the full input, not only its start."""
    keys = list(dict.fromkeys(key for key, _value in pairs))
    keep = set(keys[:max(1, len(keys) * commands // max(1, len(pairs)))])
    return [pair for pair in pairs if pair[0] in keep]


def _best(rounds: int, n: int, work: Callable[[], None]) -> float:
    """Best-of-`rounds` CPU-µs per item of `work` over `n` items."""
    spent = []
    for _ in range(rounds):
        start = time.process_time()
        work()
        spent.append(time.process_time() - start)
    return min(spent) / n * 1e6


def stage_costs(pairs: list[tuple[bytes, bytes]], rounds: int = 3) -> dict[str, float]:
    """CPU-µs per command of each unavoidable stage, plus the decision and `events`
    (events a command) for reference."""
    shell, items = _prepared(pairs)
    n = len(items)
    fast = shell.fast
    view = shell.views[0]
    tune_gc(50_000)  # as the engine does

    def read() -> None:
        for item in items:
            shell.deserialize(item.value)

    def encode() -> None:
        for item in items:
            for event in item.events:
                fast.encode(event)
                fast.headers(event)

    def state_json() -> None:
        for item in items:
            if item.after is not None:
                dump_state(item.after, item.parts)

    def user_view() -> None:
        for item in items:
            if item.after is not None:
                list(view(item.after))

    def decide() -> None:
        for item in items:
            decide_evolve(item.command, item.before, CTX)

    costs = {"read + validate": _best(rounds, n, read), "encode events": _best(rounds, n, encode),
             "state JSON": _best(rounds, n, state_json), "user view": _best(rounds, n, user_view),
             "decide + fold (not in the bound)": _best(rounds, n, decide)}
    costs["events"] = sum(len(item.events) for item in items) / n
    return costs


def bound_us(costs: dict[str, float], floor_io_us: float) -> float:
    """The bound's CPU-µs per command: the unavoidable stages, and the floor's Kafka I/O cost
    per record (half its consume-and-produce overhead a record moved) for the command read and
    its events, state and view records written."""
    records = 1 + costs["events"] + 2
    return sum(costs[s] for s in STAGES) + records * floor_io_us / 2


def bound_line(costs: dict[str, float], floor_us_per_event: float, floor_io_us: float) -> str:
    """How close to the floor a decider that decides nothing could come, as one line."""
    bound = bound_us(costs, floor_io_us)
    share = floor_us_per_event * costs["events"] / bound
    stages = ", ".join(f"{s} {costs[s]:.1f}" for s in STAGES)
    io = bound - sum(costs[s] for s in STAGES)
    return (f"a decider that decides nothing, with these serializers: {bound:.1f} CPU-µs a command ({stages}, "
            f"Kafka I/O {io:.1f}) = at most {share:.0%} of the floor loop's "
            f"events per CPU-s ({costs['events']:.2f} events a command, floor {floor_us_per_event:.2f} µs an event); "
            f"deciding costs {costs['decide + fold (not in the bound)']:.1f} µs more")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--commands", type=int, default=SAMPLE_COMMANDS)
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=3, help="measure this many times: median (range)")
    parser.add_argument("--floor-us-per-event", type=float, default=0.0)
    parser.add_argument("--floor-io-us", type=float, default=0.0)
    args = parser.parse_args()
    pairs = generate(args.commands, args.runs)
    runs = [stage_costs(pairs, args.rounds) for _ in range(args.repeat)]
    load = Path("/proc/loadavg").read_text().split()[:3]
    print(f"CPU-µs a command, {len(pairs)} commands over {args.runs} runs, median (range) of {args.repeat}; "
          f"load {load}")
    for stage in runs[0]:
        values = [r[stage] for r in runs]
        print(f"  {stage:34s} {statistics.median(values):6.2f} ({min(values):.2f}-{max(values):.2f})")
    if args.floor_us_per_event:
        median = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        print(bound_line(median, args.floor_us_per_event, args.floor_io_us))


if __name__ == "__main__":
    main()

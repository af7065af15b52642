"""Step latency of the peers (docs/benchmarks.md, step latency): DBOS Transact and LangGraph + PostgresSaver on the
project's PostgreSQL, the same instant tool, with and without an approval.

Run (after `benchmarks/step_latency.py`, in the same hour; its result file gives the ratios):
    python -m venv /tmp/peers && /tmp/peers/bin/pip install -e '.[bench-peers]'
    /tmp/peers/bin/python benchmarks/step_peers.py --dsn postgresql://runfacts@127.0.0.1:55432/runfacts \
        [--calls 300] [--approvals 100] [--rounds 3] [--runfacts .runfacts/bench-results/step-latency-*.json] \
        [--load 0.1,0.5,0.7]

- DBOS Transact: a workflow with one step (`@DBOS.workflow` calling a `@DBOS.step` that returns its
  argument), called and waited for; and the same step behind `DBOS.recv("approval")`: the workflow
  is started, the approver's `DBOS.send` goes as soon as the workflow's status is PENDING, and the
  result is awaited (the system database on the DSN, schema `dbos`).
- LangGraph 1.2 with `PostgresSaver`: a one-node graph (the node returns its input) invoked on a
  fresh thread; and a node behind `interrupt()`: invoke (stops at the interrupt), then
  `invoke(Command(resume=True))` (the resumed node returns).
Rounds alternate the four blocks. Each block also prints durable steps per CPU-second: of this
process (the peer runs in it) and with PostgreSQL's processes (comm `postgres`, /proc utime +
stime; a database shared with other work makes that a lower bound). `--load 0.1,0.5,0.7` then
measures, for the step without approval of each peer, its capacity (closed loops of
`--capacity-threads` callers on threads; LangGraph from a connection pool) and open-loop steps
at each share of it, as step_latency.py --load does. Printed: p50/p90/p99/max per block, per-round p50s, and with
`--runfacts` the ratios runfacts / peer at p50 from that step_latency result (its variant
`--variant-name`, default the last one).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, TypedDict

from step_latency import cpu_seconds, drive, med_range, pct, summary  # the same quantiles as the runs compared with


def postgres_pids() -> list[int]:
    """PostgreSQL's processes on this machine (the postmaster and its backends: comm `postgres`)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() == "postgres":
                    found.append(int(entry.name))
            except (FileNotFoundError, ProcessLookupError, PermissionError):
                continue
    return found


def stack_cpu() -> tuple[float, float]:
    """CPU seconds so far: this process (the peer runs in it, threads included), PostgreSQL's
    processes (shared with whatever else uses the database: the stack's figure is a lower bound)."""
    return cpu_seconds(os.getpid()), sum(map(cpu_seconds, postgres_pids()))


def load_block(fn: Any, what: str, level: float, seconds: float, start: int) -> dict[str, Any]:
    """As step_latency.load_block: `closed` (`level` threads calling back to back) or `open`
    (`level` calls a second, each latency from its scheduled start)."""
    lock = threading.Lock()
    seq = [start]
    totals: list[float] = []
    failed = [0]

    def one(scheduled: float) -> None:
        with lock:
            seq[0] += 1
            n = seq[0]
        try:
            fn(n)
        except Exception:  # noqa: BLE001 - counted
            with lock:
                failed[0] += 1
            return
        with lock:
            totals.append((time.perf_counter() - scheduled) * 1000)

    before = stack_cpu()
    span = drive(one, what, level, seconds)
    after = stack_cpu()
    return {"total": totals, "seconds": span, "failed": failed[0],
            "cpu": {"app": after[0] - before[0], "database": after[1] - before[1]}}


def per_cpu(blocks: list[dict[str, Any]]) -> tuple[list[float], list[float]]:
    """Per block: durable steps per CPU-second of the app, and of the app + the database."""
    app = [len(b["total"]) / b["cpu"]["app"] for b in blocks if b["cpu"]["app"] > 0]
    stack = [len(b["total"]) / (b["cpu"]["app"] + b["cpu"]["database"]) for b in blocks
             if b["cpu"]["app"] + b["cpu"]["database"] > 0]
    return app, stack


def dbos_blocks(dsn: str) -> tuple[Any, Any]:
    from dbos import DBOS

    DBOS(config={"name": "runfacts-step-peers", "system_database_url": dsn})  # type: ignore[typeddict-item]

    @DBOS.step()
    def echo(x: int) -> int:
        return x

    @DBOS.workflow()
    def one_step(x: int) -> int:
        return echo(x)

    @DBOS.workflow()
    def approved_step(x: int) -> int:
        decision = DBOS.recv("approval", timeout_seconds=60)
        if decision != "approve":
            raise RuntimeError(f"no approval: {decision!r}")
        return echo(x)

    DBOS.launch()

    def step(i: int) -> float:
        t0 = time.perf_counter()
        assert one_step(i) == i
        return (time.perf_counter() - t0) * 1000

    def approval(i: int) -> float:
        t0 = time.perf_counter()
        handle = DBOS.start_workflow(approved_step, i)
        while handle.get_status().status != "PENDING":  # the approver reads the request
            time.sleep(0.0005)
        DBOS.send(handle.get_workflow_id(), "approve", topic="approval")
        assert handle.get_result() == i
        return (time.perf_counter() - t0) * 1000

    return step, approval


class State(TypedDict):
    x: int
    out: int


def langgraph_blocks(dsn: str, pooled: int = 0) -> tuple[Any, Any, Any]:
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import Command, interrupt
    from psycopg import Connection
    from psycopg.rows import dict_row

    if pooled:  # callers on many threads (--load): a connection each, from a pool
        from psycopg_pool import ConnectionPool

        conn = ConnectionPool(dsn, min_size=1, max_size=pooled, open=True,
                              kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row})
    else:
        conn = Connection.connect(dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row)
    saver = PostgresSaver(conn)  # type: ignore[arg-type]
    saver.setup()

    def tool(state: State) -> dict[str, int]:
        return {"out": state["x"]}

    def gated(state: State) -> dict[str, int]:
        if interrupt({"approve": state["x"]}) is not True:
            raise RuntimeError("no approval")
        return {"out": state["x"]}

    plain = StateGraph(State).add_node("tool", tool).add_edge(START, "tool").add_edge("tool", END)
    gate = StateGraph(State).add_node("tool", gated).add_edge(START, "tool").add_edge("tool", END)
    plain_graph, gate_graph = plain.compile(checkpointer=saver), gate.compile(checkpointer=saver)

    def step(i: int) -> float:
        cfg = {"configurable": {"thread_id": f"peer-{uuid.uuid4().hex}"}}
        t0 = time.perf_counter()
        assert plain_graph.invoke({"x": i, "out": 0}, cfg)["out"] == i  # type: ignore[arg-type]
        return (time.perf_counter() - t0) * 1000

    def approval(i: int) -> float:
        cfg = {"configurable": {"thread_id": f"peer-{uuid.uuid4().hex}"}}
        t0 = time.perf_counter()
        first = gate_graph.invoke({"x": i, "out": 0}, cfg)  # type: ignore[arg-type]
        assert "__interrupt__" in first, first
        assert gate_graph.invoke(Command(resume=True), cfg)["out"] == i  # type: ignore[arg-type]
        return (time.perf_counter() - t0) * 1000

    return step, approval, conn


def run_load(args: argparse.Namespace, steps: dict[str, Any],
             loads: list[str]) -> dict[str, tuple[float, dict[float, list[dict[str, Any]]]]]:
    """Per peer: its capacity (the best closed loop), then open-loop blocks at each share, the
    shares alternated over the rounds."""
    out: dict[str, tuple[float, dict[float, list[dict[str, Any]]]]] = {}
    shares = [float(x) for x in args.load.split(",") if x]
    seq = 1_000_000
    for name, fn in steps.items():
        best = 0.0
        for threads in [int(t) for t in args.capacity_threads.split(",") if t]:
            got = load_block(fn, "closed", threads, args.capacity_seconds, seq)
            seq += 1_000_000
            rate = len(got["total"]) / got["seconds"]
            best = max(best, rate)
            print(f"capacity {name}: {threads} callers -> {rate:.1f} steps/s ({got['failed']} failed); "
                  f"{load_line()}", flush=True)
        table: dict[float, list[dict[str, Any]]] = {}
        for round_no in range(1, args.load_rounds + 1):
            for share in shares[round_no % len(shares):] + shares[:round_no % len(shares)]:
                got = load_block(fn, "open", round(best * share, 2), args.load_seconds, seq)
                seq += 1_000_000
                table.setdefault(share, []).append(got)
                print(f"round {round_no} {name} at {share:.0%}: p50 {pct(got['total'], 0.5):.1f} ms, p99 "
                      f"{pct(got['total'], 0.99):.1f} ({got['failed']} failed); {load_line()}", flush=True)
        out[name] = (best, table)
        loads.append(load_line())
    return out


def load_line() -> str:
    with open("/proc/loadavg", encoding="utf-8") as fh:
        return "load average " + " ".join(fh.read().split()[:3])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default="postgresql://runfacts@127.0.0.1:55432/runfacts")
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--approvals", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--runfacts", type=Path, help="a step_latency.py result JSON (for the ratios)")
    parser.add_argument("--variant-name", default="", help="its variant (default: the last)")
    parser.add_argument("--load", default="", help="shares of each peer's capacity, e.g. 0.1,0.5,0.7: its "
                        "capacity (closed loops of callers on threads), then open-loop steps at each share "
                        "(empty: skip)")
    parser.add_argument("--load-seconds", type=float, default=10.0)
    parser.add_argument("--load-rounds", type=int, default=3)
    parser.add_argument("--capacity-threads", default="4,16")
    parser.add_argument("--capacity-seconds", type=float, default=8.0)
    args = parser.parse_args()
    loads = [load_line()]
    if not postgres_pids():
        print("note: no `postgres` process on this machine: the database's CPU is not counted", flush=True)
    d_step, d_approval = dbos_blocks(args.dsn)
    threads = [int(t) for t in args.capacity_threads.split(",") if t]
    l_step, l_approval, conn = langgraph_blocks(args.dsn, pooled=max(threads, default=4) * 2 if args.load else 0)
    blocks = {"DBOS workflow + step": d_step, "DBOS step behind recv/send": d_approval,
              "LangGraph + PostgresSaver node": l_step, "LangGraph node behind interrupt()": l_approval}
    for fn in blocks.values():
        for i in range(args.warmup):
            fn(i)
    results: dict[str, list[list[float]]] = {name: [] for name in blocks}
    cpu: dict[str, list[dict[str, Any]]] = {name: [] for name in blocks}
    for _ in range(args.rounds):
        for name, fn in blocks.items():
            n = args.approvals if "behind" in name else args.calls
            before = stack_cpu()
            results[name].append([fn(i) for i in range(max(1, n // args.rounds))])
            after = stack_cpu()
            cpu[name].append({"total": results[name][-1],
                              "cpu": {"app": after[0] - before[0], "database": after[1] - before[1]}})
    loads.append(load_line())
    load_results = run_load(args, {"DBOS workflow + step": d_step, "LangGraph + PostgresSaver node": l_step},
                            loads) if args.load else {}
    print(f"peers, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {args.rounds} rounds; "
          f"{loads[0]} at the start, {loads[-1]} at the end")
    stats = {}
    for name, rounds in results.items():
        s = stats[name] = summary([v for r in rounds for v in r])
        per_round = [pct(r, 0.5) for r in rounds]
        app, stack = per_cpu(cpu[name])
        print(f"  {name}: p50 {s['p50']:.1f} / p90 {s['p90']:.1f} / p99 {s['p99']:.1f} / max {s['max']:.1f} ms "
              f"(n {s['n']}; per-round p50 {min(per_round):.1f}-{max(per_round):.1f}, "
              f"median {statistics.median(per_round):.1f}); durable steps per CPU-second: app "
              f"{med_range(app, '{:.0f}')}, app + PostgreSQL {med_range(stack, '{:.0f}')}")
    for name, (capacity, table) in load_results.items():
        print(f"  load table ({name}; capacity {capacity:.1f} steps/s; median (range) over rounds):")
        print("  | share | steps/s | p50 ms | p90 | p99 | max | per-round p50 | steps/CPU-s app | + PostgreSQL "
              "| failed |")
        print("  |---|---|---|---|---|---|---|---|---|---|")
        for share, blocks_at in sorted(table.items()):
            values = [v for b in blocks_at for v in b["total"]]
            q = summary(values)
            app, stack = per_cpu(blocks_at)
            rate = statistics.median(len(b["total"]) / b["seconds"] for b in blocks_at)
            print(f"  | {share:.0%} | {rate:.1f} | {q['p50']:.1f} | {q['p90']:.1f} | {q['p99']:.1f} | {q['max']:.1f} "
                  f"| {med_range([pct(b['total'], 0.5) for b in blocks_at])} | {med_range(app, '{:.0f}')} "
                  f"| {med_range(stack, '{:.0f}')} | {sum(b['failed'] for b in blocks_at)} |")
    if args.runfacts is not None:
        rf = json.loads(args.runfacts.read_text())
        name = args.variant_name or list(rf["variants"])[-1]
        mine = rf["variants"][name]["stats"]
        step, approved = mine["call.total"]["p50"], mine.get("approve.total", {}).get("p50", 0.0)
        print(f"  runfacts ({name}, {args.runfacts.name}): step p50 {step:.1f} ms, approved p50 {approved:.1f} ms")
        for peer, own, label in (("DBOS workflow + step", step, "step"),
                                 ("DBOS step behind recv/send", approved, "approved"),
                                 ("LangGraph + PostgresSaver node", step, "step"),
                                 ("LangGraph node behind interrupt()", approved, "approved")):
            if own:
                print(f"  runfacts {label} / {peer}: {own / stats[peer]['p50']:.2f}x at p50")
    conn.close()
    from dbos import DBOS

    DBOS.destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main())

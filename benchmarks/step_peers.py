"""Step latency of the peers (docs/benchmarks.md, step latency): DBOS Transact and LangGraph + PostgresSaver on the
project's PostgreSQL, the same instant tool, with and without an approval.

Run (after `benchmarks/step_latency.py`, in the same hour; its result file gives the ratios):
    python -m venv /tmp/peers && /tmp/peers/bin/pip install -e '.[bench-peers]'
    /tmp/peers/bin/python benchmarks/step_peers.py --dsn postgresql://runfacts@127.0.0.1:55432/runfacts \
        [--calls 300] [--approvals 100] [--rounds 3] [--runfacts .runfacts/bench-results/step-latency-*.json]

- DBOS Transact: a workflow with one step (`@DBOS.workflow` calling a `@DBOS.step` that returns its
  argument), called and waited for; and the same step behind `DBOS.recv("approval")`: the workflow
  is started, the approver's `DBOS.send` goes as soon as the workflow's status is PENDING, and the
  result is awaited (the system database on the DSN, schema `dbos`).
- LangGraph 1.2 with `PostgresSaver`: a one-node graph (the node returns its input) invoked on a
  fresh thread; and a node behind `interrupt()`: invoke (stops at the interrupt), then
  `invoke(Command(resume=True))` (the resumed node returns).
Rounds alternate the four blocks. Printed: p50/p90/p99/max per block, per-round p50s, and with
`--runfacts` the ratios runfacts / peer at p50 from that step_latency result (its variant
`--variant-name`, default the last one).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any, TypedDict

from step_latency import pct, summary  # the same nearest-rank quantiles as the runs they are compared with


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


def langgraph_blocks(dsn: str) -> tuple[Any, Any, Any]:
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import Command, interrupt
    from psycopg import Connection
    from psycopg.rows import dict_row

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
    args = parser.parse_args()
    loads = [load_line()]
    d_step, d_approval = dbos_blocks(args.dsn)
    l_step, l_approval, conn = langgraph_blocks(args.dsn)
    blocks = {"DBOS workflow + step": d_step, "DBOS step behind recv/send": d_approval,
              "LangGraph + PostgresSaver node": l_step, "LangGraph node behind interrupt()": l_approval}
    for fn in blocks.values():
        for i in range(args.warmup):
            fn(i)
    results: dict[str, list[list[float]]] = {name: [] for name in blocks}
    for _ in range(args.rounds):
        for name, fn in blocks.items():
            n = args.approvals if "behind" in name else args.calls
            results[name].append([fn(i) for i in range(max(1, n // args.rounds))])
    loads.append(load_line())
    print(f"peers, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {args.rounds} rounds; "
          f"{loads[0]} at the start, {loads[-1]} at the end")
    stats = {}
    for name, rounds in results.items():
        s = stats[name] = summary([v for r in rounds for v in r])
        per_round = [pct(r, 0.5) for r in rounds]
        print(f"  {name}: p50 {s['p50']:.1f} / p90 {s['p90']:.1f} / p99 {s['p99']:.1f} / max {s['max']:.1f} ms "
              f"(n {s['n']}; per-round p50 {min(per_round):.1f}-{max(per_round):.1f}, "
              f"median {statistics.median(per_round):.1f})")
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

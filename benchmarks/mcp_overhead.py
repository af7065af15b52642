"""Governed MCP overhead: an MCP client calling a read-only, instant tool directly vs through
runfacts (`client -> runfacts mcp serve -> decider/dispatcher -> the same MCP server`).

Run (alone on the machine; never beside other benchmarks):
    KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9092 .venv/bin/python benchmarks/mcp_overhead.py \
        [--calls 200] [--rounds 3]

The downstream server is benchmarks/mcp_echo_server.py (`echo`, read-only: no approval). On
fresh topics under their own prefix, the run decider and the dispatcher run as `runfacts worker`
subprocesses with `--tools mcp:<manifest>`; the official SDK's `Client` talks over stdio to
the server itself ("direct") and to `runfacts mcp serve` ("governed"), one call at a time, each
governed call with its own idempotency key (so each is a run: start, propose, authorized at
once, executed, result, complete). Rounds alternate direct and governed blocks. Reported per
mode: p50/p90/p99/max over all calls and the per-round p50s (median and range); the ratio of
the governed p50 to the direct p50 and the overhead in ms. Results as JSON under
.runfacts/bench-results/.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters
from step_latency import pct, summary  # the same nearest-rank quantiles as the runs they are compared with

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SERVER = HERE / "mcp_echo_server.py"




def write_manifest(workdir: Path) -> Path:
    path = workdir / "bench.mcp.toml"
    path.write_text(f'name = "bench"\ncommand = [{json.dumps(sys.executable)}, {json.dumps(str(SERVER))}]\n\n'
                    "[tool.echo]\nread_only = true\n")
    return path


def start_workers(bootstrap: str, prefix: str, workdir: Path, tools: str) -> list[subprocess.Popen[bytes]]:
    from runfacts.processors.decider.app import APP_NAME
    from runfacts.processors.dispatcher.app import app_name as dispatcher_app
    from runfacts.settings import KafkaSettings
    from runfacts.topics import TopicNames, apply_topics, changelog_spec, runfacts_topics

    decider_app = APP_NAME if prefix == "runfacts" else f"{prefix}-run-decider"
    specs = runfacts_topics(TopicNames(prefix), 2)
    specs += [changelog_spec(f"{decider_app}-{s}-changelog", 2) for s in ("orphans", "__timers")]
    specs += [changelog_spec(f"{dispatcher_app(prefix)}-{s}-changelog", 2) for s in ("runs", "progress", "__timers")]
    apply_topics(KafkaSettings(bootstrap_servers=bootstrap), specs)
    procs = []
    for name, extra in (("decider", []), ("dispatcher", ["--args-store", str(workdir / "args.db")])):
        env = {**os.environ, "RUNFACTS_KAFKA_BOOTSTRAP_SERVERS": bootstrap, "RUNFACTS_INSTANCE_ID": name,
               "RUNFACTS_STATE_DIR": str(workdir / "state" / name)}
        log = (workdir / f"{name}.log").open("ab")
        procs.append(subprocess.Popen([sys.executable, "-m", "runfacts.cli", "worker", name, "--prefix", prefix,
                                       "--tools", tools, *extra], env=env, stdout=log, stderr=log, cwd=workdir))
    for name in ("decider", "dispatcher"):
        deadline = time.monotonic() + 180
        while "assigned partitions" not in (workdir / f"{name}.log").read_text(errors="replace"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not start: see {workdir / name}.log")
            time.sleep(0.2)
    return procs


async def block(params: StdioServerParameters, tool: str, calls: int, governed: bool) -> list[float]:
    """`calls` sequential calls in one session; ms each (after one warm-up call)."""
    times: list[float] = []
    async with Client(params) as client:
        for n in range(calls + 1):
            meta = {"io.runfacts/idempotencyKey": f"bench-{uuid.uuid4().hex}"} if governed else None
            started = time.perf_counter()
            result = await client.call_tool(tool, {"text": f"call {n}"}, meta=meta)
            elapsed = (time.perf_counter() - started) * 1000
            if result.is_error or (result.structured_content or {}).get("text") != f"call {n}":
                raise RuntimeError(f"{tool} answered {result!r}")
            if n:
                times.append(elapsed)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092"))
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="mcp-overhead-"))
    prefix = f"mcpbench-{uuid.uuid4().hex[:8]}"
    manifest = write_manifest(workdir)
    tools = f"mcp:{manifest}"
    procs = start_workers(args.bootstrap, prefix, workdir, tools)
    direct = StdioServerParameters(command=sys.executable, args=[str(SERVER)], cwd=str(workdir))
    governed = StdioServerParameters(
        command=sys.executable, args=["-m", "runfacts.cli", "mcp", "serve", "--tools", tools, "--agent", "bench"],
        cwd=str(workdir), env={"PATH": os.environ.get("PATH", ""), "RUNFACTS_KAFKA_BOOTSTRAP_SERVERS": args.bootstrap,
                               "RUNFACTS_KAFKA_TOPIC_PREFIX": prefix, "RUNFACTS_ARGS_STORE": str(workdir / "args.db")})
    results: dict[str, list[list[float]]] = {"direct": [], "governed": []}
    loads = []
    try:
        for round_no in range(1, args.rounds + 1):
            results["direct"].append(asyncio.run(block(direct, "echo", args.calls, governed=False)))
            results["governed"].append(asyncio.run(block(governed, "bench.echo", args.calls, governed=True)))
            loads.append(os.getloadavg()[0])
            print(f"round {round_no}: direct p50 {pct(results['direct'][-1], 0.5):.2f} ms, governed p50 "
                  f"{pct(results['governed'][-1], 0.5):.1f} ms (load {loads[-1]:.1f})", flush=True)
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(30)
    report: dict[str, Any] = {"calls": args.calls, "rounds": args.rounds, "load_1m": loads}
    for mode, rounds in results.items():
        every = [ms for one in rounds for ms in one]
        per_round = [pct(one, 0.5) for one in rounds]
        report[mode] = {**summary(every), "round_p50s": per_round, "round_p50_median": statistics.median(per_round)}
        s = report[mode]
        print(f"{mode:9} p50 {s['p50']:8.2f} ms  p90 {s['p90']:8.2f}  p99 {s['p99']:8.2f}  max {s['max']:8.2f}  "
              f"round p50s median {s['round_p50_median']:.2f} (range {min(per_round):.2f}-{max(per_round):.2f})")
    ratio = report["governed"]["p50"] / report["direct"]["p50"]
    report["ratio_p50"], report["overhead_p50_ms"] = ratio, report["governed"]["p50"] - report["direct"]["p50"]
    print(f"governed / direct at p50: {ratio:.1f}x; overhead {report['overhead_p50_ms']:.1f} ms a call "
          f"(a run each: start, propose, authorize, execute, result, complete); load {min(loads):.1f}-{max(loads):.1f}")
    out = REPO / ".runfacts" / "bench-results" / f"mcp_overhead-{time.strftime('%Y%m%dT%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

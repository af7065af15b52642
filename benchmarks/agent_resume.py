"""Time to resume an agent's runs after its process is killed (bar: p50 <= 5 s; docs/guide.md §6).

    KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9092 python benchmarks/agent_resume.py [--rounds 5] [--runs 3]
        [--session-ms 3000]

On the real broker: topics under a fresh prefix and the run decider (`runfacts worker decider`).
Each round, a fresh agent (its own consumer group) is served by two processes (this script with
`serve`); `--runs` runs are submitted on ONE partition, so one process owns them all; each run's
handler records a first step (a reasoning) and, in the process that owns it first, stops there (as
if busy). That process is killed with SIGKILL; the round's time is from the kill until the other
process has re-entered every run: replayed the first step from the log and had its next step
(`progress.updated`, "resumed") recorded, each run's time printed by the survivor as it returns.

Prints each round, then p50 and the range, with the session timeout the agents joined with. A
broker whose `group.min.session.timeout.ms` (read-only, Kafka's default 6000) exceeds
`--session-ms` refuses it: the agents fall back to the broker's minimum, the script says so and
measures with that (restart the broker with scripts/kafka/broker.properties, which sets 1000).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve()
PARTITIONS = 2


def serve() -> None:
    """One agent process: serves $BENCH_AGENT until killed; stdout lines `owner <run>`,
    `resumed <run> <wall time>`, `session <ms>`."""
    import logging

    from runfacts.client import Run, Runfacts

    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    marks = Path(os.environ["BENCH_MARKS"])
    rf = Runfacts.connect()
    out = threading.Lock()

    def say(line: str) -> None:  # one write per line: the runs' threads print at once
        with out:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    def handler(run: Run) -> None:
        run.reason(f"{run.goal}: look it up", evidence=[run.goal])
        mark = marks / run.id
        try:
            with mark.open("x") as first:  # the first process to get here owns the run, and stays busy
                first.write(str(os.getpid()))
            say(f"owner {run.id}")
            time.sleep(3600)
        except FileExistsError:
            pass
        run.progress("resumed", verified=[f"pid:{os.getpid()}"])
        say(f"resumed {run.id} {time.time():.3f}")
        run.complete(outcome="resumed")

    agent = rf.agent(os.environ["BENCH_AGENT"])(handler)

    def report_session() -> None:
        while agent.session_timeout_ms is None or not agent._owned:  # noqa: SLF001 - joined
            time.sleep(0.05)
        say(f"session {agent.session_timeout_ms}")

    threading.Thread(target=report_session, daemon=True).start()
    agent.serve(poll_s=0.05)


def broker_floor_ms(bootstrap: str) -> int | None:
    from confluent_kafka.admin import AdminClient, ConfigResource

    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        resource = ConfigResource(ConfigResource.Type.BROKER, str(min(admin.list_topics(timeout=10).brokers)))
        entry = admin.describe_configs([resource])[resource].result(timeout=10)["group.min.session.timeout.ms"]
        return int(entry.value)
    except Exception as exc:  # noqa: BLE001 - advice only
        print(f"could not read the broker's group.min.session.timeout.ms: {exc}")
        return None


def wait_text(path: Path, text: str, timeout: float, count: int = 1) -> str:
    deadline = time.monotonic() + timeout
    found = ""
    while time.monotonic() < deadline:
        found = path.read_text(errors="replace") if path.exists() else ""
        if found.count(text) >= count:
            return found
        time.sleep(0.02)
    raise SystemExit(f"{path.name} shows {found.count(text)} of {count} {text!r} within {timeout}s: {found[-1500:]}")


def runs_on_one_partition(tag: str, n: int) -> list[str]:
    from runfacts.partitioning import partition_for

    found: list[str] = []
    i = 0
    while len(found) < n:
        run_id = f"resume-{tag}-{i}"
        if partition_for(run_id.encode(), PARTITIONS) == 0:
            found.append(run_id)
        i += 1
    return found


def one_round(rf: object, env: dict[str, str], workdir: Path, n: int, runs: int) -> tuple[float, str]:
    """Seconds from the kill until the survivor re-entered every run; the session joined with."""
    agent_name = f"bench-{n}-{uuid.uuid4().hex[:6]}"
    marks = workdir / f"marks-{n}"
    marks.mkdir()
    env = {**env, "BENCH_AGENT": agent_name, "BENCH_MARKS": str(marks)}
    procs: list[subprocess.Popen[bytes]] = []
    outs: list[Path] = []
    try:
        for i in range(2):
            out, err = workdir / f"r{n}-agent{i}.out", workdir / f"r{n}-agent{i}.err"
            outs.append(out)
            with out.open("w") as sink, err.open("w") as errs:
                procs.append(subprocess.Popen([sys.executable, str(HERE), "serve"], env=env, stdout=sink,
                                              stderr=errs))
            wait_text(out, "session", 120)  # joined, owns a partition (the second one: after a rebalance)
        session = outs[0].read_text().split("session", 1)[1].split()[0]
        submitter = rf.agent(agent_name)(lambda run: None)  # type: ignore[attr-defined]
        run_ids = runs_on_one_partition(agent_name, runs)
        for run_id in run_ids:
            submitter.submit(goal=f"ticket:{run_id}", summary="resume bench", user_id="bench", run_id=run_id)
        for run_id in run_ids:
            deadline = time.monotonic() + 120
            while not (marks / run_id).exists() or not (marks / run_id).read_text():
                if time.monotonic() > deadline:
                    raise SystemExit(f"no process started run {run_id} within 120 s")
                time.sleep(0.02)
        owners = {(marks / r).read_text() for r in run_ids}
        assert len(owners) == 1, f"runs on one partition owned by several processes: {owners}"
        pid = int(owners.pop())
        victim = next(p for p in procs if p.pid == pid)
        survivor_out = next(o for p, o in zip(procs, outs, strict=True) if p.pid != pid)
        wait_text(outs[procs.index(victim)], "owner", 30, count=runs)  # every run paused after its first step
        killed = time.time()
        victim.send_signal(signal.SIGKILL)
        victim.wait(30)
        text = wait_text(survivor_out, "resumed ", 120, count=runs)
        done = [float(line.split()[2]) for line in text.splitlines() if line.startswith("resumed ")]
        return max(done) - killed, session
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=3, help="open runs the killed process owns")
    parser.add_argument("--session-ms", type=int, default=3000, help="RUNFACTS_AGENT_SESSION_TIMEOUT_MS")
    parser.add_argument("--keep", action="store_true", help="keep the topics and the work directory")
    args = parser.parse_args()

    from runfacts.client import Runfacts
    from runfacts.demo.stack import DemoOptions, DemoStack
    from runfacts.settings import KafkaSettings

    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    floor = broker_floor_ms(bootstrap)
    if floor is not None and floor > args.session_ms:
        print(f"NOTE: the broker's group.min.session.timeout.ms is {floor} ms: it refuses --session-ms "
              f"{args.session_ms}; the agents fall back to {floor} ms and this measures that. For the "
              "bar restart the broker with scripts/kafka/broker.properties (group.min.session.timeout.ms=1000).")
    workdir = Path(tempfile.mkdtemp(prefix="agent-resume-"))
    options = DemoOptions(prefix=f"resume-{uuid.uuid4().hex[:8]}", workdir=workdir / "stack", partitions=PARTITIONS,
                          keep_topics=args.keep, kafka=KafkaSettings(bootstrap_servers=bootstrap))
    stack = DemoStack(options)
    stack.dir.mkdir(parents=True)
    stack._topics()  # noqa: SLF001 - the demo's topics, then only the decider (no tools in this story)
    stack._spawn_worker("decider", [])  # noqa: SLF001
    env = {**os.environ, "RUNFACTS_KAFKA_BOOTSTRAP_SERVERS": bootstrap, "RUNFACTS_KAFKA_TOPIC_PREFIX": options.prefix,
           "RUNFACTS_AGENT_SESSION_TIMEOUT_MS": str(args.session_ms), "PYTHONUNBUFFERED": "1"}
    rf = Runfacts.connect(kafka=options.kafka, prefix=options.prefix)
    times: list[float] = []
    sessions: set[str] = set()
    try:
        deadline = time.monotonic() + 180
        while "assigned partitions" not in (stack.dir / "decider.log").read_text(errors="replace"):
            if time.monotonic() > deadline:
                raise SystemExit(f"the decider did not start within 180 s: see {stack.dir / 'decider.log'}")
            time.sleep(0.2)
        for n in range(args.rounds):
            seconds, session = one_round(rf, env, workdir, n, args.runs)
            times.append(seconds)
            sessions.add(session)
            print(f"round {n + 1}: {args.runs} runs resumed {seconds:.2f} s after kill -9 (session {session} ms)",
                  flush=True)
    finally:
        rf.close()
        stack.stop()
    print(f"agent resume after kill -9: p50 {statistics.median(times):.2f} s, range {min(times):.2f}-"
          f"{max(times):.2f} s over {len(times)} rounds of {args.runs} runs; session.timeout.ms "
          f"{'/'.join(sorted(sessions))} (asked {args.session_ms}, broker minimum {floor}); bar p50 <= 5 s")
    print(f"logs: {workdir}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        serve()
    else:
        main()

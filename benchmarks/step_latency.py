"""Step latency: a durable tool call through the packaged workers, against the log's own floor.

Run (the lead's or the benchmark helper's job; never beside other benchmarks):
    KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9092 .venv/bin/python benchmarks/step_latency.py \
        [--calls 500] [--rounds 5] [--starts 100] [--approvals 200] [--hops] \
        [--load 0.1,0.5,0.7 [--load-seconds 10] [--load-rounds 3] [--capacity-threads 4,16]]
The full set (README "Measured"), unattended in about 3-4 minutes on the 2-core machine (then step_peers.py
with the same --load, about 3 more):
    ... step_latency.py --calls 300 --rounds 3 --starts 60 --approvals 90 --hops --load 0.1,0.5,0.7

`--load` (bars 1, 2 and 4), after the rounds, per variant: the capacity, i.e. the most completed
calls a second of `--capacity-threads` closed loops (callers on threads of the agent, each
proposing its next call when the last returned, `--capacity-seconds`); then, alternated over
`--load-rounds`, open-loop calls at each share of it for `--load-seconds` (started on a fixed
schedule, each latency counted from its scheduled start, so a queue shows). Per share: p50/p90/
p99/max, the per-round p50s and p99s (median, range), command -> committed user view (from the
propose to the first committed user view of the run at the proposal's version, read by a
read_committed `view` subprocess; bar 4 at 70%), and durable steps per CPU-second: of runfacts'
processes (decider, dispatcher, agent: /proc utime + stime of every thread) and with the
broker's (a shared broker counts whatever else it serves: a lower bound for the stack). The
one-at-a-time calls of the rounds print the same per CPU-second and the CPU ms a call per
process; `--idle-seconds` each process's CPU with no calls. The run ends with a summary table.

Per variant (default: one, this tree with its defaults), on fresh topics under its own prefix:
the run decider and the dispatcher as `runfacts worker` subprocesses serving
`benchmarks/step_tools.py` (`bench.echo`: no approval, returns at once; `bench.approve`: a
support agent's approval), an *agent* subprocess using `runfacts.client`, and an *approver*
subprocess: a second client that follows the events topic and approves each
`approval.required` as soon as it reads it (`decide(..., wait=False)`). The agent measures
- `start_run` acknowledged: `rf.start_run(...)` returned (run.created read back);
- `propose` -> `call.result()`: `run.propose("bench.echo", ...)` then `call.result()`, one call
  at a time, 50 calls a run (an agent's loop); also `propose` alone (the decider's answer);
- the same for `bench.approve` with the automatic approver.
The log's own floor, in the same run: `--floor-stages` (5: the decider three times, the
dispatcher twice) pass-through read-process-write stages, each a transactional
confluent-kafka loop that commits every consume, chained topic to topic, fed by an idempotent
producer (the client's) and read by a read_committed consumer (the client's follower): the six
log crossings of a tool call with no work. A message is sent only when the previous one came
out. runfacts' step latency is reported as a ratio of it.
Rounds alternate (per round: every variant's blocks, then the floor's), so a slow spell of the
shared machine hits all alike; reported: p50/p90/p99/max over all calls, and the per-round
p50s (median and range). `--hops` reads back the commands and events of the measured calls
and prints the time between consecutive records (producer timestamps), i.e. where the time goes:
p50 / p90 / p99 per hop, and each hop's mean in the slowest 5% of calls (what the tail is made of).
A variant is JSON: {"name": "...", "python": "/path/to/other/venv/bin/python",
"env": {"RUNFACTS_POLL_TIMEOUT_MS": "5"}}: workers, agent and approver run with that interpreter
(another checkout's editable install: A/B of a code change) and environment. The bars (README
"Measured") are printed PASS/FAIL (exit 1 if one fails); results as JSON under
.runfacts/bench-results/.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
TOOLS = "step_tools:registry"
CALLS_PER_RUN = 50
BARS = {"start_run p50": 10.0, "step p50": 20.0, "step p99": 60.0, "approved step p50": 40.0,
        "view p99 at 70%": 100.0}
"""The step-latency bars, ms (idle machine; README "Measured")."""


def pct(values: list[float], q: float) -> float:
    """The q-quantile by nearest rank (0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))]


def summary(values: list[float]) -> dict[str, float]:
    return {"n": len(values), "p50": pct(values, 0.5), "p90": pct(values, 0.9), "p99": pct(values, 0.99),
            "max": max(values) if values else 0.0, "min": min(values) if values else 0.0}


# --- the agent, the approver and a floor stage (subprocesses) ---------------------------------

def agent_main(args: argparse.Namespace) -> None:
    """Reads `<what> <n> <round>` lines on stdin, answers one JSON line of latencies (ms) each."""
    from runfacts.client import ClientSettings, Runfacts, UiSettings
    from runfacts.settings import KafkaSettings

    rf = Runfacts.connect(kafka=KafkaSettings(bootstrap_servers=args.bootstrap), prefix=args.prefix,
                          args_store=args.args_store, settings=ClientSettings(ui=UiSettings(signing_env={})))
    print(json.dumps({"ready": True}), flush=True)
    counter = 0
    for line in sys.stdin:
        what, n, round_no, *rest = line.split()
        if what in ("closed", "open"):
            print(json.dumps(load_block(rf, args.tag, what, float(n), float(rest[0]), int(round_no))), flush=True)
            continue
        out: dict[str, Any] = {"what": what, "round": int(round_no), "total": [], "propose": [], "calls": []}
        run = None
        for i in range(int(n)):
            counter += 1
            if what == "start":
                t0 = time.perf_counter()
                rf.start_run(goal=f"goal-{counter}", summary="step bench", user_id="u",
                             run_id=f"{args.tag}-s{counter}")
                out["total"].append((time.perf_counter() - t0) * 1000)
                continue
            if run is None or i % CALLS_PER_RUN == 0:
                run = rf.start_run(goal=f"goal-{counter}", summary="step bench", user_id="u",
                                   run_id=f"{args.tag}-r{counter}")
            capability = "bench.echo" if what == "call" else "bench.approve"
            started_ms = time.time() * 1000
            t0 = time.perf_counter()
            call = run.propose(capability, {"n": counter}, target=f"t{counter}")
            t1 = time.perf_counter()
            value = call.result(timeout=60)
            t2 = time.perf_counter()
            if value != {"n": counter}:
                raise AssertionError(f"{call}: result {value!r}, expected {{'n': {counter}}}")
            out["propose"].append((t1 - t0) * 1000)
            out["total"].append((t2 - t0) * 1000)
            out["calls"].append([run.id, call.id, started_ms, started_ms + (t2 - t0) * 1000])
        print(json.dumps(out), flush=True)
    rf.close()


def load_block(rf: Any, tag: str, what: str, level: float, seconds: float, round_no: int) -> dict[str, Any]:
    """Many calls at once. `closed`: `level` threads, each proposing its next call as soon as the
    last one returned, for `seconds` (the capacity: completed calls a second). `open`: calls
    started at a fixed rate of `level` a second for `seconds` (a pool of threads, each with runs
    of its own), each latency counted from its scheduled start, so a queue shows (no coordinated
    omission). Each call's [run, the proposal's version, its start on CLOCK_MONOTONIC] goes
    back too, for the command -> committed user view latency (`view_main`)."""
    local = threading.local()
    lock = threading.Lock()
    seq = [0]
    totals: list[float] = []
    calls: list[list[Any]] = []
    errors: list[str] = []

    def one(scheduled: float) -> None:
        with lock:
            seq[0] += 1
            n = seq[0]
        try:
            used = getattr(local, "used", CALLS_PER_RUN)
            if used >= CALLS_PER_RUN:
                local.run = rf.start_run(goal=f"load-{n}", summary="step bench", user_id="u",
                                         run_id=f"{tag}-{what}{round_no}-{uuid.uuid4().hex[:8]}")
                local.used = used = 0
                scheduled = max(scheduled, time.perf_counter())  # a run's start is not a step
            local.used = used + 1
            t0 = time.perf_counter()
            call = local.run.propose("bench.echo", {"n": n}, target=f"t{n}")
            if call.result(timeout=120) != {"n": n}:
                raise AssertionError(f"{call}: wrong result")
            done = time.perf_counter()
        except Exception as exc:  # noqa: BLE001 - counted and shown, the block goes on
            with lock:
                errors.append(repr(exc))
            return
        with lock:
            totals.append((done - scheduled) * 1000)
            calls.append([local.run.id, call.version, t0])

    return {"what": what, "round": round_no, "level": level, "seconds": drive(one, what, level, seconds),
            "total": totals,
            "propose": [], "calls": calls, "errors": errors[:5], "failed": len(errors)}


def drive(one: Callable[[float], None], what: str, level: float, seconds: float) -> float:
    """Call `one(scheduled_start)` for `seconds`: "closed", `level` threads each calling again as
    soon as its call returns; "open", `level` calls a second on a fixed schedule (a pool, so a slow
    call does not delay the next one's start). The span: until the last closed caller returned, or
    the schedule's `seconds`. Shared with step_peers.py, so the peers are driven the same way."""
    from concurrent.futures import ThreadPoolExecutor

    started = time.perf_counter()
    deadline = started + seconds
    if what == "closed":
        def loop() -> None:
            while time.perf_counter() < deadline:
                one(time.perf_counter())
        threads = [threading.Thread(target=loop) for _ in range(int(level))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return time.perf_counter() - started
    with ThreadPoolExecutor(max_workers=max(4, min(256, int(level * 2)))) as pool:
        i = 0
        while (at := started + i / level) < deadline:
            if (pause := at - time.perf_counter()) > 0:
                time.sleep(pause)
            pool.submit(one, at)
            i += 1
    return seconds


def view_main(args: argparse.Namespace) -> None:
    """Follows the committed user views (read_committed); on a line `dump` on stdin, answers
    {run: [[version, when first seen on CLOCK_MONOTONIC], ...]} (each version rise) and forgets."""
    from confluent_kafka import Consumer, TopicPartition

    from runfacts.projections.user_view import schema
    from runfacts.topics import TopicNames

    topic = TopicNames(args.prefix).user_view
    consumer = Consumer({"bootstrap.servers": args.bootstrap, "group.id": f"{args.prefix}-view-{uuid.uuid4().hex[:6]}",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "fetch.wait.max.ms": 5})
    parts = consumer.list_topics(topic, timeout=30).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, 0) for p in parts])
    decode = schema().decode
    seen: dict[str, list[list[float]]] = {}
    lock = threading.Lock()
    stop = threading.Event()

    def answer() -> None:
        for line in sys.stdin:
            with lock:
                out = dict(seen)
                seen.clear()
            print(json.dumps(out), flush=True)
            if line.strip() != "dump":
                break
        stop.set()

    threading.Thread(target=answer, daemon=True).start()
    print(json.dumps({"ready": True}), flush=True)
    while not stop.is_set():
        messages = consumer.consume(500, 0.005)
        now = time.perf_counter()  # CLOCK_MONOTONIC: the same clock as the agent's
        with lock:
            for m in messages:
                if m.error() is not None or m.value() is None:
                    continue
                version = decode(m.value())["version"]
                versions = seen.setdefault(m.key().decode(), [])
                if not versions or version > versions[-1][0]:
                    versions.append([version, now])
    consumer.close()


def view_latencies(calls: list[list[Any]], seen: dict[str, list[list[float]]]) -> tuple[list[float], int]:
    """Command -> committed user view: per call, from its propose to the first committed view of its
    run at the proposal's version or later; and how many calls no view showed."""
    out, missing = [], 0
    for run_id, version, t0 in calls:
        shown = next((at for v, at in seen.get(run_id, []) if version is not None and v >= version), None)
        if shown is None:
            missing += 1
        else:
            out.append(max(0.0, shown - t0) * 1000)
    return out, missing


def approver_main(args: argparse.Namespace) -> None:
    """A second client: approves every approval.required it reads, at once (wait=False)."""
    from datetime import UTC, datetime

    from confluent_kafka import Consumer

    from runfacts.client import Approval, ClientSettings, Runfacts, UiSettings
    from runfacts.schemas.codec import Codec
    from runfacts.settings import KafkaSettings
    from runfacts.topics import TopicNames

    names = TopicNames(args.prefix)
    rf = Runfacts.connect(kafka=KafkaSettings(bootstrap_servers=args.bootstrap), prefix=args.prefix,
                          args_store=args.args_store,
                          settings=ClientSettings(component="approver", ui=UiSettings(signing_env={})))
    codec = Codec()
    ready = threading.Event()
    consumer = Consumer({"bootstrap.servers": args.bootstrap, "group.id": f"{args.prefix}-approver",
                         "isolation.level": "read_committed", "auto.offset.reset": "latest",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 10})
    consumer.subscribe([names.events], on_assign=lambda _c, _p: ready.set())
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    said = False
    while not stop.is_set():
        msg = consumer.poll(0.05)
        if ready.is_set() and not said:
            print(json.dumps({"ready": True}), flush=True)
            said = True
        if msg is None or msg.error() is not None or msg.value() is None:
            continue
        record = codec.decode_dict(msg.value())
        if record.get("eventType") != "approval.required":
            continue
        p = record["payload"]
        expires = p["expiresAt"]
        expires_at = expires if isinstance(expires, datetime) else datetime.fromtimestamp(expires / 1000, UTC)
        approval = Approval(run_id=msg.key().decode(), approval_id=p["approvalId"], tool_call_id=p["toolCallId"],
                            asks=p["summary"], risk=p["risk"], required_role=p["requiredRole"],
                            expires_at=expires_at, args_hash=p["argsHash"], tenant=None, requesters=("u",),
                            display_digest=p.get("displayDigest"))  # the signed decision binds what was shown
        rf.decide(approval, "approve", approver="auto-approver", wait=False)
    consumer.close()
    rf.close()


def stage_main(args: argparse.Namespace) -> None:
    """One pass-through stage of the floor: consume, produce each record on, commit, in one
    transaction per consume (no work, no interval)."""
    from confluent_kafka import Consumer, Producer

    from runfacts.processors.engine.settings import PRODUCER_RETRY

    consumer = Consumer({"bootstrap.servers": args.bootstrap, "group.id": args.group,
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "fetch.wait.max.ms": args.fetch_wait_ms})
    producer = Producer({"bootstrap.servers": args.bootstrap, "transactional.id": args.group,
                         "enable.idempotence": True, "linger.ms": 0,
                         **PRODUCER_RETRY})  # as the engine's: no 100 ms stall a commit
    producer.init_transactions()
    assigned = threading.Event()
    consumer.subscribe([args.src], on_assign=lambda _c, _p: assigned.set())
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    said = False
    while not stop.is_set():
        first = consumer.poll(0.1)
        if assigned.is_set() and not said:
            print(json.dumps({"ready": True}), flush=True)
            said = True
        if first is None:
            continue
        msgs = [first, *consumer.consume(500, 0)]
        msgs = [m for m in msgs if m.error() is None]
        if not msgs:
            continue
        producer.begin_transaction()
        for m in msgs:
            producer.produce(args.dst, m.value(), m.key())
        producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                             consumer.consumer_group_metadata())
        producer.commit_transaction()
    consumer.close()


# --- the orchestrator ---------------------------------------------------------------------------

def cpu_seconds(pid: int) -> float:
    """utime + stime of every thread of `pid` (0 once it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return 0.0
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pids_of(needle: str) -> list[int]:
    """The processes whose command line holds `needle` (the broker: `kafka.Kafka`; PostgreSQL:
    `postgres`), this machine's /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
            except (FileNotFoundError, ProcessLookupError, PermissionError):
                continue
            if needle.encode() in cmdline:
                found.append(int(entry.name))
    return found


class CpuMeter:
    """CPU seconds of the stack between two readings: runfacts' own processes (the workers and
    the agent) and the broker's (shared: on a machine where other work uses the same broker its
    share is counted too, so the stack's figure is a lower bound)."""

    def __init__(self, own: dict[str, int], broker: list[int]) -> None:
        self.own, self.broker = own, broker

    def read(self) -> dict[str, float]:
        """CPU seconds so far by process name (`broker`: the broker's)."""
        return {**{name: cpu_seconds(pid) for name, pid in self.own.items()},
                "broker": sum(map(cpu_seconds, self.broker))}

@dataclass
class Proc:
    popen: subprocess.Popen[str]
    name: str

    def expect_ready(self, timeout: float = 120) -> None:
        line = _readline(self.popen, timeout)
        if '"ready"' not in line:
            raise RuntimeError(f"{self.name} did not start: {line!r}")

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(20)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)


def _readline(popen: subprocess.Popen[str], timeout: float) -> str:
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(popen.stdout.readline() if popen.stdout else ""), daemon=True)
    reader.start()
    reader.join(timeout)
    if not got:
        raise RuntimeError(f"no answer within {timeout}s")
    return got[0]


@dataclass
class Variant:
    name: str
    python: str = sys.executable
    env: dict[str, str] = field(default_factory=dict)
    prefix: str = ""
    workdir: Path = Path()
    procs: list[Proc] = field(default_factory=list)
    agent: Proc | None = None
    topics: list[str] = field(default_factory=list)
    results: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    idle: dict[str, float] = field(default_factory=dict)

    def spawn(self, name: str, args: list[str], bootstrap: str, extra: dict[str, str] | None = None,
              pipe: bool = False) -> Proc:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RUNFACTS_APPROVAL_KEYS",
                                                                          "RUNFACTS_SOURCE_KEYS", "RUNFACTS_PII"))}
        env.update({"RUNFACTS_KAFKA_BOOTSTRAP_SERVERS": bootstrap,
                    "RUNFACTS_STATE_DIR": str(self.workdir / "state" / name), "RUNFACTS_INSTANCE_ID": name,
                    "PYTHONPATH": str(HERE), **self.env, **(extra or {})})
        log = (self.workdir / f"{name}.log").open("a")
        popen = subprocess.Popen([self.python, *args], env=env, stdout=subprocess.PIPE if pipe else subprocess.DEVNULL,
                                 stdin=subprocess.PIPE if pipe else subprocess.DEVNULL, stderr=log, text=True,
                                 cwd=self.workdir)
        proc = Proc(popen, f"{self.name}/{name}")
        self.procs.append(proc)
        return proc

    def ask(self, what: str, n: float, round_no: int, timeout: float, *extra: float,
            meter: CpuMeter | None = None) -> dict[str, Any]:
        assert self.agent is not None and self.agent.popen.stdin is not None
        before = meter.read() if meter is not None else {}
        self.agent.popen.stdin.write(" ".join(str(x) for x in (what, n, round_no, *extra)) + "\n")
        self.agent.popen.stdin.flush()
        answer = json.loads(_readline(self.agent.popen, timeout) or "null")
        if not answer:
            raise RuntimeError(f"{self.name}: the agent stopped (see {self.workdir}/agent.log)")
        if meter is not None:
            after = meter.read()
            answer["cpu"] = {name: after[name] - before[name] for name in after}
        self.results.setdefault(what, []).append(answer)
        return answer

    def meter(self) -> CpuMeter:
        """The workers' and the agent's CPU (not the approver's: the load blocks have no approvals)."""
        own = {p.name.rsplit("/", 1)[-1]: p.popen.pid for p in self.procs
               if p.name.rsplit("/", 1)[-1] in ("decider", "dispatcher", "agent")}
        return CpuMeter(own, pids_of("kafka.Kafka"))


def start_variant(variant: Variant, bootstrap: str, partitions: int, approvals: bool) -> None:
    from runfacts.processors.decider.app import APP_NAME
    from runfacts.processors.dispatcher.app import app_name as dispatcher_app
    from runfacts.settings import KafkaSettings
    from runfacts.topics import TopicNames, apply_topics, changelog_spec, runfacts_topics

    names = TopicNames(variant.prefix)
    decider_app = APP_NAME if variant.prefix == "runfacts" else f"{variant.prefix}-run-decider"
    specs = runfacts_topics(names, partitions)
    specs += [changelog_spec(f"{decider_app}-{s}-changelog", partitions) for s in ("orphans", "__timers")]
    specs += [changelog_spec(f"{dispatcher_app(variant.prefix)}-{s}-changelog", partitions)
              for s in ("runs", "progress", "__timers")]
    apply_topics(KafkaSettings(bootstrap_servers=bootstrap), specs)
    variant.topics = [s.name for s in specs]
    args_store = str(variant.workdir / "args.db")
    worker = ["-m", "runfacts.cli", "worker"]
    variant.spawn("decider", [*worker, "decider", "--prefix", variant.prefix, "--tools", TOOLS], bootstrap)
    variant.spawn("dispatcher", [*worker, "dispatcher", "--prefix", variant.prefix, "--tools", TOOLS,
                                 "--args-store", args_store], bootstrap)
    for log in ("decider.log", "dispatcher.log"):
        _wait_log(variant.workdir / log, "assigned partitions", 180)
    common = ["--bootstrap", bootstrap, "--prefix", variant.prefix, "--args-store", args_store, "--tag",
              f"{variant.prefix}"]
    if approvals:
        variant.spawn("approver", [str(Path(__file__)), "approver", *common], bootstrap, pipe=True).expect_ready()
    variant.agent = variant.spawn("agent", [str(Path(__file__)), "agent", *common], bootstrap, pipe=True)
    variant.agent.expect_ready()


def _wait_log(path: Path, text: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not (path.exists() and text in path.read_text(errors="replace")):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{path} shows no {text!r} within {timeout}s")
        time.sleep(0.2)


class Floor:
    """The chained pass-through stages and the client ends of the floor."""

    def __init__(self, bootstrap: str, stages: int, workdir: Path, fetch_wait_ms: int) -> None:
        from confluent_kafka import Consumer, Producer

        from runfacts.settings import KafkaSettings
        from runfacts.topics import TopicSpec, apply_topics

        self.tag = f"floor-{uuid.uuid4().hex[:8]}"
        self.topics = [f"{self.tag}-{i}" for i in range(stages + 1)]
        apply_topics(KafkaSettings(bootstrap_servers=bootstrap), [TopicSpec(t, 1) for t in self.topics])
        self.procs = []
        for i in range(stages):
            log = (workdir / f"floor-stage-{i}.log").open("a")
            popen = subprocess.Popen([sys.executable, str(Path(__file__)), "stage", "--bootstrap", bootstrap,
                                      "--src", self.topics[i], "--dst", self.topics[i + 1], "--group",
                                      f"{self.tag}-s{i}", "--fetch-wait-ms", str(fetch_wait_ms)],
                                     stdout=subprocess.PIPE, stderr=log, text=True)
            self.procs.append(Proc(popen, f"floor stage {i}"))
        for proc in self.procs:
            proc.expect_ready()
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                                  "linger.ms": 0})
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{self.tag}-client",
                                  "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                                  "enable.auto.commit": False, "fetch.wait.max.ms": fetch_wait_ms})
        self.consumer.subscribe([self.topics[-1]])
        self.seq = 0
        self.results: list[dict[str, Any]] = []

    def measure(self, n: int, round_no: int) -> dict[str, Any]:
        out: dict[str, Any] = {"what": "floor", "round": round_no, "total": []}
        for _ in range(n):
            self.seq += 1
            key = str(self.seq).encode()
            t0 = time.perf_counter()
            self.producer.produce(self.topics[0], key, key)
            self.producer.flush(30)
            while True:
                msg = self.consumer.poll(30)
                if msg is None:
                    raise RuntimeError(f"the floor lost message {self.seq}")
                if msg.error() is None and msg.value() == key:
                    break
            out["total"].append((time.perf_counter() - t0) * 1000)
        self.results.append(out)
        return out

    def stop(self) -> None:
        for proc in self.procs:
            proc.stop()
        self.consumer.close()


def hops(bootstrap: str, variant: Variant) -> list[str]:
    """Where a call's time goes: the median gap between its consecutive records (commands and
    events, by producer timestamp), from the agent's propose to its result()."""
    from confluent_kafka import Consumer, TopicPartition

    from runfacts.schemas.codec import Codec
    from runfacts.topics import TopicNames

    names = TopicNames(variant.prefix)
    calls = {c[1]: c for r in variant.results.get("call", []) for c in r["calls"]}
    if not calls:
        return []
    codec = Codec()
    seen: dict[str, list[tuple[float, str]]] = {}
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{variant.prefix}-hops",
                         "isolation.level": "read_committed", "enable.partition.eof": True})
    for topic in (names.commands, names.events):
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        consumer.assign([TopicPartition(topic, p, 0) for p in meta.partitions])
        open_parts = set(meta.partitions)
        while open_parts:
            for msg in consumer.consume(1000, 1.0):
                if msg.error() is not None:
                    open_parts.discard(msg.partition())
                    continue
                if msg.value() is None:
                    continue
                record = codec.decode_dict(msg.value())
                payload = record.get("payload") or {}
                call_id = payload.get("toolCallId")
                if call_id in calls:
                    kind = record.get("commandType") or record.get("eventType") or "?"
                    seen.setdefault(call_id, []).append((float(msg.timestamp()[1]), kind))
    consumer.close()
    gaps: dict[tuple[int, str], list[float]] = {}
    per_call: dict[str, dict[tuple[int, str], float]] = {}
    for call_id, records in seen.items():
        records.sort()
        done = next((i for i, r in enumerate(records) if r[1] == "tool.call.completed"), len(records) - 1)
        _, _, started, ended = calls[call_id]  # after the completed event: not on the call's path
        chain = [(started, "propose() called"), *records[:done + 1], (ended, "result() returned")]
        for i in range(1, len(chain)):
            hop, gap = (i, f"{chain[i - 1][1]} -> {chain[i][1]}"), chain[i][0] - chain[i - 1][0]
            gaps.setdefault(hop, []).append(gap)
            per_call.setdefault(call_id, {})[hop] = gap
    # the tail: the slowest 5% of calls, and each hop's mean in them (which hop the p99 is made of)
    slow = sorted(per_call, key=lambda c: calls[c][3] - calls[c][2], reverse=True)[:max(1, len(per_call) // 20)]
    lines = [f"hops ({variant.name}, {len(seen)} calls; producer timestamps, ms): p50 / p90 / p99 / "
             f"mean in the slowest 5% ({len(slow)} calls)"]
    for hop, values in sorted(gaps.items()):
        if len(values) >= len(seen) // 2:
            tail = [per_call[c][hop] for c in slow if hop in per_call[c]]
            lines.append(f"  {hop[1]}: {pct(values, 0.5):.1f} / {pct(values, 0.9):.1f} / {pct(values, 0.99):.1f} / "
                         f"{statistics.fmean(tail) if tail else 0.0:.1f}")
    return lines


def block_line(name: str, blocks: list[dict[str, Any]], key: str = "total") -> tuple[str, dict[str, float]]:
    values = [v for b in blocks for v in b[key]]
    s = summary(values)
    rounds = sorted(pct(b[key], 0.5) for b in blocks if b[key])
    spread = (f"; per-round p50 median {statistics.median(rounds):.1f} (range {rounds[0]:.1f}-{rounds[-1]:.1f})"
              if rounds else "")
    return (f"{name}: p50 {s['p50']:.1f} ms, p90 {s['p90']:.1f}, p99 {s['p99']:.1f}, max {s['max']:.1f}, "
            f"min {s['min']:.1f} over {s['n']} ({len(blocks)} rounds{spread})"), s


def load_line() -> str:
    return "load average " + " ".join(f"{v:.2f}" for v in os.getloadavg())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command")
    for name in ("agent", "approver", "view"):
        child = sub.add_parser(name)
        for option in ("--bootstrap", "--prefix", "--args-store", "--tag"):
            child.add_argument(option, required=True)
    stage = sub.add_parser("stage")
    for option in ("--bootstrap", "--src", "--dst", "--group"):
        stage.add_argument(option, required=True)
    stage.add_argument("--fetch-wait-ms", type=int, default=10)
    parser.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092"))
    parser.add_argument("--calls", type=int, default=500, help="propose -> result() calls per variant")
    parser.add_argument("--approvals", type=int, default=200, help="calls behind the automatic approver (0: skip)")
    parser.add_argument("--starts", type=int, default=100, help="start_run calls per variant")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=20, help="calls per variant before measuring")
    parser.add_argument("--floor-stages", type=int, default=5, help="0: no floor")
    parser.add_argument("--floor-fetch-wait-ms", type=int, default=10)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--variant", action="append", default=[], help="JSON: name, python, env (repeatable)")
    parser.add_argument("--hops", action="store_true", help="print where a call's time goes")
    parser.add_argument("--load", default="", help="shares of the capacity, e.g. 0.1,0.5,0.7: after the rounds, "
                        "the capacity (closed loops) and then open-loop calls at each share: latency, command -> "
                        "committed user view, durable steps per CPU-second (empty: skip)")
    parser.add_argument("--idle-seconds", type=float, default=3.0, help="CPU of each process with no calls "
                        "(before the rounds; 0: skip)")
    parser.add_argument("--load-seconds", type=float, default=10.0, help="seconds of each open-loop block")
    parser.add_argument("--load-rounds", type=int, default=3, help="rounds of the load blocks (shares alternated)")
    parser.add_argument("--capacity", type=float, default=0.0, help="steps/s to take as the capacity (0: measure)")
    parser.add_argument("--capacity-threads", default="4,16", help="closed-loop callers tried for the capacity")
    parser.add_argument("--capacity-seconds", type=float, default=8.0)
    parser.add_argument("--keep", action="store_true", help="keep topics and the work directory")
    args = parser.parse_args()
    if args.command == "agent":
        agent_main(args)
        return 0
    if args.command == "approver":
        approver_main(args)
        return 0
    if args.command == "view":
        view_main(args)
        return 0
    if args.command == "stage":
        stage_main(args)
        return 0
    return orchestrate(args)


def orchestrate(args: argparse.Namespace) -> int:
    from runfacts.settings import KafkaSettings
    from runfacts.topics import delete_topics

    kafka = KafkaSettings(bootstrap_servers=args.bootstrap)
    root = Path(tempfile.mkdtemp(prefix="step-latency-"))
    tag = uuid.uuid4().hex[:6]
    variants = [Variant(**json.loads(v)) for v in args.variant] or [Variant("runfacts")]
    loads = [load_line()]
    print(f"step latency: {args.calls} calls, {args.approvals} approved calls, {args.starts} start_run per variant, "
          f"{args.rounds} rounds; {loads[0]}; work dir {root}", flush=True)
    floor: Floor | None = None
    try:
        for i, variant in enumerate(variants):
            variant.prefix = f"sl{tag}v{i}"
            variant.workdir = root / variant.name
            variant.workdir.mkdir(parents=True)
            start_variant(variant, args.bootstrap, args.partitions, args.approvals > 0)
            print(f"variant {variant.name}: started ({variant.workdir})", flush=True)
        if args.floor_stages:
            floor = Floor(args.bootstrap, args.floor_stages, root, args.floor_fetch_wait_ms)
            floor.measure(args.warmup, 0)
            floor.results.clear()
        for variant in variants:
            variant.ask("call", args.warmup, 0, 300)
            if args.approvals:
                variant.ask("approve", max(1, args.warmup // 4), 0, 300)
            variant.results.clear()
        for variant in variants:
            if args.idle_seconds:
                meter = variant.meter()
                before = meter.read()
                time.sleep(args.idle_seconds)
                after = meter.read()
                variant.idle = {k: (after[k] - before[k]) / args.idle_seconds for k in after}
                print(f"idle {variant.name}: CPU share of a core over {args.idle_seconds:g} s with no calls: "
                      + ", ".join(f"{k} {v:.1%}" for k, v in sorted(variant.idle.items())), flush=True)
        per = {k: max(1, getattr(args, k) // args.rounds) for k in ("calls", "approvals", "starts")}
        for round_no in range(1, args.rounds + 1):
            order = variants[round_no % len(variants):] + variants[:round_no % len(variants)]
            for variant in order:
                variant.ask("start", per["starts"], round_no, 600)
                done = variant.ask("call", per["calls"], round_no, 600, meter=variant.meter())
                if args.approvals:
                    variant.ask("approve", per["approvals"], round_no, 600)
                print(f"round {round_no} {variant.name}: step p50 {pct(done['total'], 0.5):.1f} ms", flush=True)
            if floor is not None:
                done = floor.measure(per["calls"], round_no)
                print(f"round {round_no} floor: p50 {pct(done['total'], 0.5):.1f} ms", flush=True)
            loads.append(load_line())
        if args.load:
            load_phase(args, variants, loads)
        return report(args, variants, floor, loads)
    finally:
        for variant in variants:
            for proc in variant.procs:
                proc.stop()
            if variant.topics and not args.keep:
                delete_topics(kafka, variant.topics)
        if floor is not None:
            floor.stop()
            if not args.keep:
                delete_topics(kafka, floor.topics)


def load_phase(args: argparse.Namespace, variants: list[Variant], loads: list[str]) -> None:
    """The capacity of each variant, then open-loop calls at each share of it (README "Measured" bars 1, 2
    and 4); rounds alternate the variants (and the shares), as the one-at-a-time rounds do."""
    views: dict[str, Proc] = {}
    capacities: dict[str, float] = {}
    for variant in variants:
        view = views[variant.name] = variant.spawn(
            "view", [str(Path(__file__)), "view", "--bootstrap", args.bootstrap, "--prefix", variant.prefix,
                     "--args-store", "-", "--tag", "-"], args.bootstrap, pipe=True)
        view.expect_ready()
        capacity = args.capacity
        if not capacity:
            best = []
            for threads in [int(t) for t in args.capacity_threads.split(",") if t]:
                got = variant.ask("closed", threads, 0, 600, args.capacity_seconds, meter=variant.meter())
                rate = len(got["total"]) / got["seconds"]
                best.append(rate)
                print(f"capacity {variant.name}: {threads} callers -> {rate:.1f} steps/s "
                      f"(p50 {pct(got['total'], 0.5):.1f} ms, {got['failed']} failed); {load_line()}", flush=True)
            capacity = max(best)
        capacities[variant.name] = capacity
        variant.results["capacity"] = [{"total": [], "steps_per_s": capacity}]
    shares = [float(x) for x in args.load.split(",") if x]
    for round_no in range(1, args.load_rounds + 1):
        for variant in variants[round_no % len(variants):] + variants[:round_no % len(variants)]:
            capacity, view = capacities[variant.name], views[variant.name]
            for share in shares[round_no % len(shares):] + shares[:round_no % len(shares)]:
                got = variant.ask("open", round(capacity * share, 2), round_no, 600, args.load_seconds,
                                  meter=variant.meter())
                time.sleep(0.5)  # the last calls' views
                assert view.popen.stdin is not None
                view.popen.stdin.write("dump\n")
                view.popen.stdin.flush()
                seen = json.loads(_readline(view.popen, 60))
                got["view"], got["view_missing"] = view_latencies(got["calls"], seen)
                got["share"], got["load"] = share, load_line()
                variant.results.setdefault(f"load {share:g}", []).append(got)
                print(f"round {round_no} {variant.name} at {share:.0%} ({capacity * share:.1f}/s): "
                      f"p50 {pct(got['total'], 0.5):.1f} ms, p99 {pct(got['total'], 0.99):.1f}, view p99 "
                      f"{pct(got['view'], 0.99):.1f} ({got['failed']} failed); {got['load']}", flush=True)
        loads.append(load_line())
    for view in views.values():
        view.stop()


def per_cpu(blocks: list[dict[str, Any]]) -> tuple[list[float], list[float]]:
    """Per block: durable steps per CPU-second of runfacts' processes, and of those + the broker."""
    own, stack = [], []
    for b in blocks:
        cpu = b.get("cpu") or {}
        mine = sum(v for k, v in cpu.items() if k != "broker")
        if mine > 0:
            own.append(len(b["total"]) / mine)
            stack.append(len(b["total"]) / (mine + cpu.get("broker", 0.0)))
    return own, stack


def cpu_split(blocks: list[dict[str, Any]]) -> str:
    """CPU ms a call by process, summed over the blocks."""
    n = sum(len(b["total"]) for b in blocks)
    names = sorted({k for b in blocks for k in b.get("cpu") or {}})
    return ", ".join(f"{k} {1000 * sum((b.get('cpu') or {}).get(k, 0.0) for b in blocks) / max(1, n):.1f}"
                     for k in names)


def med_range(values: list[float], fmt: str = "{:.1f}") -> str:
    if not values:
        return "-"
    ordered = sorted(values)
    return f"{fmt.format(statistics.median(ordered))} ({fmt.format(ordered[0])}-{fmt.format(ordered[-1])})"


def load_table(variant: Variant) -> list[str]:
    """The load table: per share, over its rounds: latency p50/p90/p99/max (all calls), the
    per-round p50s and p99s (median, range), the view's p99, steps per CPU-second."""
    capacity = variant.results.get("capacity", [{}])[0].get("steps_per_s", 0.0)
    lines = [f"load table ({variant.name}; capacity {capacity:.1f} steps/s; latency from each call's scheduled "
             "start; median (range) over rounds):",
             "| share | steps/s | p50 ms | p90 | p99 | max | per-round p50 | per-round p99 | view p50 | view p99 "
             "| steps/CPU-s runfacts | + broker | failed |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    splits: list[str] = []
    for key in sorted((k for k in variant.results if k.startswith("load ")), key=lambda k: float(k.split()[1])):
        blocks = variant.results[key]
        values = [v for b in blocks for v in b["total"]]
        views = [v for b in blocks for v in b["view"]]
        own, stack = per_cpu(blocks)
        rate = statistics.median(len(b["total"]) / b["seconds"] for b in blocks)
        s = summary(values)
        lines.append(f"| {float(key.split()[1]):.0%} | {rate:.1f} | {s['p50']:.1f} | {s['p90']:.1f} | {s['p99']:.1f} "
                     f"| {s['max']:.1f} | {med_range([pct(b['total'], 0.5) for b in blocks])} "
                     f"| {med_range([pct(b['total'], 0.99) for b in blocks])} | {pct(views, 0.5):.1f} "
                     f"| {pct(views, 0.99):.1f} | {med_range(own, '{:.0f}')} | {med_range(stack, '{:.0f}')} "
                     f"| {sum(b['failed'] for b in blocks)} (+{sum(b['view_missing'] for b in blocks)} views unseen) |")
        splits.append(f"CPU ms a call at {float(key.split()[1]):.0%}: {cpu_split(blocks)}")
    return lines + splits


def report(args: argparse.Namespace, variants: list[Variant], floor: Floor | None, loads: list[str]) -> int:
    print(f"\nstep latency, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, broker {args.bootstrap}, "
          f"{args.rounds} rounds; {loads[0]} at the start, {loads[-1]} at the end")
    out: dict[str, Any] = {"args": {k: v for k, v in vars(args).items()}, "loads": loads, "variants": {}}
    floor_p50 = floor_p99 = 0.0
    if floor is not None:
        line, s = block_line(f"the log's floor ({args.floor_stages} transactional pass-through stages, "
                             f"{args.floor_stages + 1} crossings)", floor.results)
        print(line)
        floor_p50, floor_p99 = s["p50"], s["p99"]
        out["floor"] = s
    checks = []
    for variant in variants:
        print(f"[{variant.name}]" + (f" env {variant.env}" if variant.env else "")
              + (f" python {variant.python}" if variant.python != sys.executable else ""))
        stats: dict[str, dict[str, float]] = {}
        for what, key, name in (("start", "total", "start_run acknowledged"),
                                ("call", "propose", "propose (the decider's answer)"),
                                ("call", "total", "propose -> result(), no approval"),
                                ("approve", "total", "propose -> result(), automatic approver")):
            blocks = variant.results.get(what, [])
            if blocks and any(b[key] for b in blocks):
                line, stats[f"{what}.{key}"] = block_line(name, blocks, key)
                print(f"  {line}")
        step = stats.get("call.total")
        if step and floor_p50:
            print(f"  runfacts / floor: p50 {step['p50'] / floor_p50:.1f}x, p99 {step['p99'] / floor_p99:.1f}x")
        own, stack = per_cpu(variant.results.get("call", []))
        if own:
            print(f"  durable steps per CPU-second, one call at a time (per round: median (range)): runfacts' "
                  f"processes {med_range(own, '{:.0f}')}, with the broker {med_range(stack, '{:.0f}')}")
            stats["call.per_cpu"] = {"own": statistics.median(own), "stack": statistics.median(stack)}
            print(f"  CPU ms a call, one at a time (the broker's includes whatever else it serves): "
                  f"{cpu_split(variant.results['call'])}")
        if args.hops:
            for line in hops(args.bootstrap, variant):
                print(f"  {line}")
        if any(k.startswith("load ") for k in variant.results):
            for line in load_table(variant):
                print(f"  {line}")
            at70 = [v for b in variant.results.get("load 0.7", []) for v in b["view"]]
            if at70:
                stats["load0.7.view"] = summary(at70)
        for name, key, q in (("start_run p50", "start.total", "p50"), ("step p50", "call.total", "p50"),
                             ("step p99", "call.total", "p99"), ("approved step p50", "approve.total", "p50"),
                             ("view p99 at 70%", "load0.7.view", "p99")):
            if key in stats:
                checks.append((f"{variant.name} {name}", stats[key][q], BARS[name]))
        out["variants"][variant.name] = {"env": variant.env, "python": variant.python, "stats": stats,
                                         "rounds": {w: [{**summary(b["total"]), **({"view": summary(b["view"])}
                                                                                   if "view" in b else {}),
                                                         "cpu": b.get("cpu"), "seconds": b.get("seconds"),
                                                         "load": b.get("load")} for b in bs]
                                                    for w, bs in variant.results.items()},
                                         "capacity": variant.results.get("capacity", [{}])[0].get("steps_per_s")}
    print(f"\nsummary ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {loads[0]} -> {loads[-1]}):")
    print("| variant | start_run p50 | step p50 / p99 | x floor p50 | approved p50 | capacity steps/s "
          "| step p99 at 10/50/70% | view p99 at 70% | steps/CPU-s (runfacts; + broker) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, v in out["variants"].items():
        st = v["stats"]

        def q(key: str, which: str, st: dict[str, Any] = st) -> str:
            return f"{st[key][which]:.1f}" if key in st else "-"
        variant = next(x for x in variants if x.name == name)
        at = " / ".join(f"{pct([t for b in variant.results.get(f'load {k:g}', []) for t in b['total']], 0.99):.0f}"
                        for k in (0.1, 0.5, 0.7))
        cpu = st.get("call.per_cpu")
        cpu_text = f"{cpu['own']:.0f}; {cpu['stack']:.0f}" if cpu else "-"
        ratio = f"{st['call.total']['p50'] / floor_p50:.1f}x" if floor_p50 and "call.total" in st else "-"
        capacity = f"{v['capacity']:.1f}" if v["capacity"] else "-"
        print(f"| {name} | {q('start.total', 'p50')} | {q('call.total', 'p50')} / {q('call.total', 'p99')} "
              f"| {ratio} | {q('approve.total', 'p50')} | {capacity} "
              f"| {at if variant.results.get('load 0.7') else '-'} | {q('load0.7.view', 'p99')} | {cpu_text} |")
    print()
    for name, value, bar in checks:
        print(f"{'PASS' if value <= bar else 'FAIL'}  {name}: {value:.1f} ms (bar <= {bar:g} ms, idle)")
    result = REPO / ".runfacts" / "bench-results" / f"step-latency-{time.strftime('%Y%m%d-%H%M%S')}.json"
    result.parent.mkdir(parents=True, exist_ok=True)
    result.write_text(json.dumps(out, indent=2, default=str))
    print(f"\nresults: {result}")
    return 0 if all(value <= bar for _, value, bar in checks) else 1


if __name__ == "__main__":
    sys.exit(main())

"""One command: the runfacts engine vs Quix Streams 3.28.1 vs faust-streaming 0.15.3 vs Kafka
Streams 4.4.0 (the JVM peer), and against two hand-written confluent-kafka loops in the project
venv (peers/plain_app.py):
"floor" keeps its state in a dict written nowhere (what any engine on this stack pays before
it keeps state), "plain" reads and writes a rocksdict per record.

    .venv/bin/python benchmarks/engine_bench.py                    # full size (lead's run)
    .venv/bin/python benchmarks/engine_bench.py --events 20000 --restore-records 200000

Same broker, same generated input (~300-byte Avro envelopes, --runs runIds, 6 partitions),
same shared work in every framework: bench_common.decode (--decoder, default runfacts'
schema-compiled avrocode reader, loaded from the same file by all three) and
bench_common.reduce (per-run count + last event in RocksDB, one JSON output per input), each
framework at-least-once and exactly-once with its default commit interval.
Each processor is a subprocess (Quix and Faust from virtualenvs under .runfacts/bench-venvs/,
made on first use); at its first and last event it writes the wall time and its own CPU time
(process_time: user + system of all its threads), so start-up, group join, shutdown and the
harness are never counted. Each framework x guarantee runs --repeat rounds (default 3, Faust
1), interleaved, reported as the median round by events per CPU-second: one round on a shared
2-core machine moves by +-15%. The restore benchmark fills a transactional changelog with
--restore-records records and times `Restorer.restore` (wall) into empty RocksDB stores
(--repeat times, the median).

The JVM peer (peers/kstreams/, built with mvn on first use: Kafka Streams 4.4.0, RocksDB store,
exactly_once_v2 / at_least_once, the envelope decoded with org.apache.avro's GenericDatumReader,
the same reduction and output): `kstreams` is measured in steady state, from event
--jvm-warmup + 1 (default a quarter of the input) after the JIT compiled the hot path;
`kstreams-cold` from the first event, as the Python processors are. Its CPU time is the whole
JVM's (every thread: stream thread, client I/O, RocksDB, GC, JIT compiler). Add them with
--frameworks ...,kstreams,kstreams-cold.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
VENVS = REPO / ".runfacts" / "bench-venvs"
PEERS = {
    "quix": ("peers/quix_app.py", ["quixstreams==3.28.1", "fastavro==1.13.1"]),
    "faust": ("peers/faust_app.py", ["faust-streaming[rocksdict]==0.15.3", "fastavro==1.13.1"]),
}
JVM = {"kstreams": "steady", "kstreams-cold": "cold"}
"""The Kafka Streams peer, measured after its JIT warm-up or from its first event."""
KSTREAMS = HERE / "peers" / "kstreams"
OWN_VENV = {"runfacts": ("runfacts_app.py", []),
            "plain": ("peers/plain_app.py", ["--state", "rocksdb"]),
            "floor": ("peers/plain_app.py", ["--state", "memory"])}
"""Processors in the project's own virtualenv: the engine and two hand-written loops (plain:
per-record rocksdict, the issue's starting point; floor: a dict, no store at all)."""
sys.path.insert(0, str(HERE))
from bench_common import SCHEMA, generate  # noqa: E402


@dataclass
class Result:
    framework: str
    guarantee: str
    events: int
    wall_s: float
    cpu_s: float
    ok: bool = True
    note: str = ""

    @property
    def rate(self) -> float:
        return self.events / self.wall_s if self.ok and self.wall_s else 0.0

    @property
    def per_cpu(self) -> float:
        return self.events / self.cpu_s if self.ok and self.cpu_s else 0.0


def python_for(framework: str) -> str:
    """The interpreter for a framework: this one for OWN_VENV rows, a pinned virtualenv otherwise."""
    if framework in OWN_VENV:
        return sys.executable
    venv = VENVS / framework
    pins = PEERS[framework][1]
    marker = venv / "bench-pins.txt"
    if not marker.exists() or marker.read_text() != "\n".join(pins):
        print(f"creating {venv} with {' '.join(pins)} ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        subprocess.run([str(venv / "bin/pip"), "install", "-q", *pins], check=True)
        marker.write_text("\n".join(pins))
    return str(venv / "bin/python")


def kstreams_command() -> list[str]:
    """`java -cp ... runfacts.bench.KStreamsPeer`, building the peer with mvn when its jar is
    missing or older than its source."""
    jar = KSTREAMS / "target" / "kstreams-peer-1.jar"
    sources = [KSTREAMS / "pom.xml", *(KSTREAMS / "src").rglob("*.java")]
    if not jar.exists() or jar.stat().st_mtime < max(f.stat().st_mtime for f in sources):
        print("building the Kafka Streams peer with mvn ...", flush=True)
        subprocess.run(["mvn", "-q", "-B", "-f", str(KSTREAMS / "pom.xml"), "package",
                        "dependency:copy-dependencies", "-DskipTests"], check=True)
    classpath = ":".join([str(jar), *sorted(str(p) for p in (KSTREAMS / "target" / "lib").glob("*.jar"))])
    return ["java", "-Xms256m", "-Xmx1g", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            "-cp", classpath, "runfacts.bench.KStreamsPeer"]


def admin(bootstrap: str):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def create_topics(bootstrap: str, names: list[str], compact: bool = False) -> None:
    from confluent_kafka.admin import NewTopic

    config = {"cleanup.policy": "compact"} if compact else {}
    client = admin(bootstrap)
    futures = client.create_topics([NewTopic(n, 6, 1, config=config) for n in names])
    for future in futures.values():
        future.result()


def ensure_dead_letter_topic(bootstrap: str, topic: str = "runfacts.dlq") -> None:
    """The runfacts app's dead-letter topic (its default) must exist; a fresh broker lacks it."""
    if topic not in admin(bootstrap).list_topics(timeout=30).topics:
        create_topics(bootstrap, [topic])


def produce_input(bootstrap: str, topic: str, pairs: list[tuple[bytes, bytes]],
                  headers: list[list[tuple[str, bytes]]] | None = None) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "partitioner": "murmur2_random",
                         "queue.buffering.max.messages": 1_000_000})
    for i, (key, value) in enumerate(pairs):
        if headers is None:
            producer.produce(topic, value, key)
        else:
            producer.produce(topic, value, key, headers=headers[i])
    if producer.flush(120):
        raise RuntimeError("input not fully produced")


def run_processor(framework: str, guarantee: str, ctx: argparse.Namespace, round_no: int = 0) -> Result:
    group = f"bench-{ctx.tag}-{framework}-{guarantee.replace('_', '')}-r{round_no}"
    output = f"{group}-out"
    create_topics(ctx.bootstrap, [output])
    args = ["--input", ctx.input, "--output", output, "--group", group]
    if framework in JVM:
        work = Path(tempfile.mkdtemp(prefix=f"bench-{ctx.tag}-schema-"))
        (work / "envelope.avsc").write_text(json.dumps(SCHEMA))
        warmup = ctx.jvm_warmup if JVM[framework] == "steady" else 0
        args += ["--schema", str(work / "envelope.avsc"), "--warmup", str(warmup)]
        return launch(framework, guarantee, ctx, kstreams_command(), args, ctx.events)
    script, extra = OWN_VENV[framework] if framework in OWN_VENV else (PEERS[framework][0], [])
    return launch(framework, guarantee, ctx, [python_for(framework), str(HERE / script)], [*args, *extra],
                  ctx.events)


def run_decider(guarantee: str, ctx: argparse.Namespace, pairs: list, signed: bool = False,
                round_no: int = 0) -> Result:
    """The real run decider on the engine: commands -> events + run state; `signed`: every
    command carries its source's signature and the decider verifies it
    (docs/security.md, "Commands signed by their source")."""
    from decider_load import signature_headers

    from runfacts.settings import KafkaSettings
    from runfacts.topics import TopicNames, apply_topics, runfacts_topics

    names = TopicNames(f"bench-{ctx.tag}-dec{guarantee[:1]}{'s' if signed else ''}-r{round_no}")
    apply_topics(KafkaSettings(bootstrap_servers=ctx.bootstrap), runfacts_topics(names))
    produce_input(ctx.bootstrap, names.commands, pairs, signature_headers(pairs) if signed else None)
    view = ["--view"] if ctx.decider_view else []
    result = launch("decider", guarantee, ctx, [python_for("runfacts"), str(HERE / "decider_bench_app.py")],
                    ["--prefix", names.prefix, *view, *(["--signed"] if signed else [])], len(pairs))
    if signed:
        result.framework = "decider-signed"
    return result


def launch(framework: str, guarantee: str, ctx: argparse.Namespace, program: list[str],
           args: list[str], expect: int) -> Result:
    """Start a processor subprocess and measure it between its two progress lines."""
    work = Path(tempfile.mkdtemp(prefix=f"bench-{ctx.tag}-{framework}-"))
    progress = work / "progress"
    cmd = [*program, "--bootstrap", ctx.bootstrap, *args, "--guarantee", guarantee,
           "--state-dir", str(work / "state"), "--progress", str(progress),
           "--expect", str(expect)]
    env = {**os.environ, "PYTHONPATH": str(HERE), "BENCH_DECODER": ctx.decoder}
    with (work / "log").open("w") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        return _measure(proc, progress, framework, guarantee, expect, ctx.timeout, work)
    finally:
        _stop(proc)


def _measure(proc: subprocess.Popen, progress: Path, framework: str, guarantee: str,
             expect: int, timeout: float, work: Path) -> Result:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        lines = progress.read_text().split("\n") if progress.exists() else []
        if len([line for line in lines if line]) >= 2:
            first, last = (line.split() for line in lines[:2])
            if int(first[2]) != proc.pid or int(last[2]) != proc.pid:
                raise RuntimeError(f"{framework}: events processed outside process {proc.pid}")
            return Result(framework, guarantee, int(last[0]) - int(first[0]), float(last[1]) - float(first[1]),
                          float(last[3]) - float(first[3]))
        time.sleep(0.02)
    why = "exited" if proc.poll() is not None else f"timed out after {timeout}s"
    tail = (work / "log").read_text()[-400:].replace("\n", " | ")
    return Result(framework, guarantee, 0, 0.0, 0.0, ok=False, note=f"{why}: {tail}")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def restore_bench(ctx: argparse.Namespace, pairs: list[tuple[bytes, bytes]]) -> dict:
    """Fill `<app>-runs-changelog` transactionally, then time a restore into empty stores."""
    from confluent_kafka import Producer

    app = f"bench-{ctx.tag}-restore"
    create_topics(ctx.bootstrap, [f"{app}-runs-changelog", f"{app}-__timers-changelog"], True)
    producer = Producer({"bootstrap.servers": ctx.bootstrap, "transactional.id": app,
                         "linger.ms": 20, "queue.buffering.max.messages": 1_000_000})
    producer.init_transactions()
    keys = max(1, ctx.restore_records // 5)
    for start in range(0, ctx.restore_records, 50_000):
        producer.begin_transaction()
        for i in range(start, min(start + 50_000, ctx.restore_records)):
            key, value = pairs[i % len(pairs)]
            producer.produce(f"{app}-runs-changelog", (i // keys + 1).to_bytes(8, "big") + value,
                             f"{key.decode()}-{i % keys}".encode(), partition=i % 6)
        producer.commit_transaction(120)
    rounds = []
    for _ in range(ctx.repeat):  # each into fresh, empty stores in a fresh process
        state = tempfile.mkdtemp(prefix=f"{app}-")
        done = subprocess.run([sys.executable, __file__, "restore-child", "--bootstrap",
                               ctx.bootstrap, "--app", app, "--state-dir", state],
                              capture_output=True, text=True, check=False)
        shutil.rmtree(state, ignore_errors=True)
        if done.returncode != 0:
            return {"ok": False, "note": done.stderr[-400:]}
        rounds.append(json.loads(done.stdout.strip().splitlines()[-1]))
    rounds.sort(key=lambda r: r["seconds"])
    median = rounds[(len(rounds) - 1) // 2]
    # The consume-only loop: the same reader (restore_config, read_committed, to the end of
    # every partition) with no store write, in a fresh process: what reading alone costs.
    done = subprocess.run([sys.executable, __file__, "consume-child", "--bootstrap",
                           ctx.bootstrap, "--app", app, "--state-dir", tempfile.gettempdir()],
                          capture_output=True, text=True, check=False)
    consume = (json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0
               else {"ok": False, "note": done.stderr[-400:]})
    return {"ok": True, **median, "rounds_s": [r["seconds"] for r in rounds],
            "consume_only": consume}


def restore_child(args: argparse.Namespace) -> None:
    """In a fresh process: restore all 6 partitions of the changelog into empty RocksDBs."""
    from runfacts.processors.engine.api import Application, Source
    from runfacts.processors.engine.changelog import Restorer
    from runfacts.processors.engine.gctune import tune_gc
    from runfacts.processors.engine.settings import EngineSettings
    from runfacts.processors.engine.store import RocksBackend

    app = Application(args.app, (Source(f"{args.app}-unused"),), lambda r, c: None, ("runs",))
    settings = EngineSettings(bootstrap_servers=args.bootstrap, state_dir=Path(args.state_dir))
    backends = {p: RocksBackend(Path(args.state_dir) / str(p), app.all_stores) for p in range(6)}
    restorer = Restorer(app, settings)
    tune_gc(settings.gc_threshold)  # as Engine.run does before it restores
    usage0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    records = restorer.restore(backends)  # type: ignore[arg-type]
    seconds = time.perf_counter() - t0
    usage1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (usage1.ru_utime + usage1.ru_stime) - (usage0.ru_utime + usage0.ru_stime)
    restorer.close()
    for backend in backends.values():
        backend.close()
    print(json.dumps({"records": records, "seconds": seconds, "cpu_s": cpu}))


def consume_child(args: argparse.Namespace) -> None:
    """In a fresh process: read all 6 changelog partitions to their ends, writing nothing."""
    from confluent_kafka import Consumer, TopicPartition

    from runfacts.processors.engine.api import Application, Source
    from runfacts.processors.engine.settings import EngineSettings, restore_config

    app = Application(args.app, (Source(f"{args.app}-unused"),), lambda r, c: None, ("runs",))
    settings = EngineSettings(bootstrap_servers=args.bootstrap, state_dir=Path(args.state_dir))
    consumer = Consumer(restore_config(app, settings))
    consumer.assign([TopicPartition(f"{args.app}-runs-changelog", p, 0) for p in range(6)])
    usage0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    records, ended = 0, set()
    while len(ended) < 6:
        for msg in consumer.consume(settings.restore_batch, 0.05):
            if msg.error() is None:
                records += 1
            else:
                ended.add(msg.partition())
    seconds = time.perf_counter() - t0
    usage1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (usage1.ru_utime + usage1.ru_stime) - (usage0.ru_utime + usage0.ru_stime)
    consumer.close()
    print(json.dumps({"records": records, "seconds": seconds, "cpu_s": cpu}))


def cleanup(bootstrap: str, tag: str) -> None:
    client = admin(bootstrap)
    names = [t for t in client.list_topics(timeout=30).topics if tag in t]
    if names:
        for future in client.delete_topics(names, operation_timeout=30).values():
            try:
                future.result()
            except Exception as exc:  # a topic another client deleted meanwhile
                print(f"cleanup: {exc}", file=sys.stderr)


def bar_checks(results: list[Result], restore: dict | None,
               ctx: argparse.Namespace) -> list[tuple[str, float, str, bool]]:
    """The issue's bars: (what, measured, bar, passed)."""
    by = {(r.framework, r.guarantee): r for r in results}
    checks = []
    for g in ctx.guarantees:
        ours = by.get(("runfacts", g))
        for peer, bar in (("quix", 3.0), ("faust", 20.0)):
            theirs = by.get((peer, g))
            if ours and theirs and theirs.per_cpu:
                ratio = ours.per_cpu / theirs.per_cpu
                checks.append((f"runfacts/{peer} events per CPU-s ({g})", ratio, f">= {bar}x",
                               ratio >= bar))
    alos, eos = by.get(("runfacts", "at_least_once")), by.get(("runfacts", "exactly_once"))
    if alos and eos and alos.per_cpu and alos.rate:
        for what, a, e in (("events/CPU-s", alos.per_cpu, eos.per_cpu),
                           ("events/s", alos.rate, eos.rate)):
            cost = 1 - e / a
            checks.append((f"exactly-once cost vs at-least-once ({what})", cost * 100, "<= 10%",
                           cost <= 0.10))
    if restore:
        rate = restore["records"] / restore["seconds"] if restore.get("ok") else 0.0
        checks.append((f"restore rate ({restore.get('records', 0):,} records)", rate,
                       ">= 300,000/s", rate >= 300_000))
    return checks


def shared_cost_us(pairs: list[tuple[bytes, bytes]], decoder: str) -> tuple[float, float]:
    """CPU µs per event of the work every framework does alike, (decode + reduce with dict
    state, decode alone): the best of three passes over a sample."""
    from bench_common import decoder as named
    from bench_common import reduce

    decode = named(decoder)
    sample, both, alone, state = pairs[:20_000], [], [], {}
    for _ in range(3):
        start = time.process_time()
        for key, raw in sample:
            state[key], _ = reduce(state.get(key), raw, decode(raw))
        both.append(time.process_time() - start)
        start = time.process_time()
        for _key, raw in sample:
            decode(raw)
        alone.append(time.process_time() - start)
    return min(both) / len(sample) * 1e6, min(alone) / len(sample) * 1e6


def floor_lines(by: dict[tuple[str, str], Result], g: str) -> list[str]:
    """Where runfacts stands against the hand-written floor loop, and the floor against Quix:
    the highest runfacts/quix ratio any engine on confluent-kafka and CPython could show."""
    ours, floor, quix = by.get(("runfacts", g)), by.get(("floor", g)), by.get(("quix", g))
    if not (ours and floor and ours.per_cpu and floor.per_cpu):
        return []
    line = f"runfacts reaches {ours.per_cpu / floor.per_cpu:.0%} of the floor loop's events/CPU-s ({g})"
    if quix and quix.per_cpu:
        line += f"; floor/quix = {floor.per_cpu / quix.per_cpu:.2f}x"
    return [line]


def decider_floor_lines(ctx: argparse.Namespace, g: str) -> list[str]:
    """The decider against the floor loop, round by round: information, not a bar. The
    first bar (decider with the view >= 50% of the floor) is retired (docs/benchmarks.md): the bound
    `decider_bound.py` measures (a decider that decides nothing) is this design's ceiling for
    this ratio, so the script reports it and never exits 1 on it."""
    ratios = sorted(decider_floor_ratios(ctx, g))
    if not ratios:
        return []
    median = ratios[(len(ratios) - 1) // 2]
    view = " with the user view" if ctx.decider_view else ""
    return [f"decider{view} / floor loop, events per CPU-s ({g}; median of {len(ratios)} rounds, "
            f"range {ratios[0]:.0%}-{ratios[-1]:.0%}): {median:.1%} (the 50% bar is retired: "
            f"information)"]


def context_lines(results: list[Result], restore: dict | None,
                  ctx: argparse.Namespace) -> list[str]:
    """What the ratios rest on: overhead ratios (independent of the shared work) and restore CPU."""
    by = {(r.framework, r.guarantee): r for r in results}
    lines = []
    for g in ctx.guarantees:
        ours = by.get(("runfacts", g))
        for peer in ("quix", "faust"):
            theirs = by.get((peer, g))
            if ours and theirs and ours.per_cpu and theirs.per_cpu:
                mine, other = 1e6 / ours.per_cpu - ctx.shared_us, 1e6 / theirs.per_cpu - ctx.shared_us
                lines.append(f"{peer}/runfacts framework overhead per event ({g}): "
                             f"{other:.1f} / {mine:.1f} µs = {other / mine:.1f}x")
        lines += floor_lines(by, g)
        lines += decider_floor_lines(ctx, g)
        floor = by.get(("floor", g))
        if getattr(ctx, "bound", None) and floor and floor.per_cpu:
            from decider_bound import bound_line, bound_us

            per_event = 1e6 / floor.per_cpu
            lines.append(f"({g}) " + bound_line(ctx.bound, per_event, per_event - ctx.shared_us))
            decider = by.get(("decider", g))
            if decider and decider.per_cpu:  # commands per CPU-s
                bound, spent = bound_us(ctx.bound, per_event - ctx.shared_us), 1e6 / decider.per_cpu
                view = " with the user view" if ctx.decider_view else " (no user view)"
                lines.append(f"({g}) the decider{view} costs {spent:.1f} CPU-µs a command: "
                             f"{bound / spent:.0%} of its speed if it decided nothing ({bound:.1f} µs)")
        for peer in JVM:
            theirs = by.get((peer, g))
            if ours and theirs and ours.per_cpu and theirs.per_cpu:
                lines.append(f"runfacts/{peer} events per CPU-s ({g}): {ours.per_cpu:,.0f} / {theirs.per_cpu:,.0f}"
                             f" = {ours.per_cpu / theirs.per_cpu:.2f}x")
    if restore and restore.get("ok"):
        lines.append(f"restore: {restore['records']:,} records in {restore['seconds']:.2f} s wall "
                     f"(median of rounds {', '.join(f'{s:.2f}' for s in restore.get('rounds_s', []))}), "
                     f"{restore['cpu_s'] / restore['records'] * 1e6:.2f} CPU-µs/record")
        only = restore.get("consume_only") or {}
        if only.get("records"):
            lines.append(f"consume-only loop over the same changelog: {only['records'] / only['seconds']:,.0f} "
                         f"records/s, {only['cpu_s'] / only['records'] * 1e6:.2f} CPU-µs/record; restore at "
                         f"{restore['records'] / restore['seconds'] / (only['records'] / only['seconds']):.0%} of it")
    return lines


def report(results: list[Result], restore: dict | None, ctx: argparse.Namespace) -> bool:
    print(f"\nengine benchmark: {ctx.events} events, {ctx.runs} runIds, 6 partitions, "
          f"broker {ctx.bootstrap}\nshared work, the same code in every framework: "
          f"{ctx.decoder} Avro decode + reduce = {ctx.shared_us:.1f} CPU-µs/event "
          f"(decode {ctx.decode_us:.1f}); overhead = CPU-µs/event - shared work")
    print(f"{'framework':<10} {'guarantee':<14} {'events/s':>10} {'events/CPU-s':>13} "
          f"{'overhead µs':>12} {'wall s':>8} {'CPU s':>8}  note")
    for r in results:
        overhead = (1e6 / r.per_cpu - ctx.shared_us if r.per_cpu and not r.framework.startswith("decider")
                    and r.framework not in JVM else 0)
        print(f"{r.framework:<10} {r.guarantee:<14} {r.rate:>10,.0f} {r.per_cpu:>13,.0f} "
              f"{overhead:>12.1f} {r.wall_s:>8.2f} {r.cpu_s:>8.2f}  {r.note[:120]}")
    checks = bar_checks(results, restore, ctx)
    print()
    for name, value, bar, ok in checks:
        print(f"{'PASS' if ok else 'FAIL'}  {name}: {value:,.2f} (bar {bar})")
    for line in context_lines(results, restore, ctx):
        print(f"info  {line}")
    out = REPO / ".runfacts" / "bench-results" / f"engine-{ctx.tag}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"args": {k: v for k, v in vars(ctx).items() if k != "func"},
                               "results": [asdict(r) | {"rate": r.rate, "per_cpu": r.per_cpu}
                                           for r in results], "restore": restore}, indent=2))
    print(f"\nresults: {out}")
    return all(ok for *_, ok in checks)


def decider_commands(args: argparse.Namespace) -> tuple[list, float]:
    """The decider's input (encoded commands) and how many events it emits per command."""
    from decider_load import events_per_command
    from decider_load import generate as commands

    print(f"generating {args.decider_commands} decider commands ...", flush=True)
    command_pairs = commands(args.decider_commands, args.runs)
    return command_pairs, events_per_command(command_pairs)


def decider_round(args: argparse.Namespace, command_pairs: list, per_command: float,
                  round_no: int) -> list[Result]:
    """One round of the decider rows (each guarantee, signed too with --decider-signed); a
    Result counts commands (its note the events: `per_command` per command)."""
    results = []
    for guarantee in args.guarantees:
        print(f"running decider {guarantee}{' with the user view' if args.decider_view else ''} "
              f"(round {round_no + 1}) ...", flush=True)
        for signed in ((False, True) if args.decider_signed else (False,)):
            result = run_decider(guarantee, args, command_pairs, signed, round_no)
            result.note = (f"{per_command:.2f} events/command: {result.rate * per_command:,.0f} events/s, "
                           f"{result.per_cpu * per_command:,.0f} events/CPU-s {result.note}")
            results.append(result)
            print(f"  {'signed ' if signed else ''}{result.rate:,.0f} commands/s, {result.per_cpu:,.0f} "
                  f"commands/CPU-s; {result.note[:200]}", flush=True)
    return results


def run_frameworks(args: argparse.Namespace, command_pairs: list | None = None,
                   per_command: float = 0.0) -> list[Result]:
    """Every framework x guarantee, --repeat rounds interleaved (so a slow spell of the shared
    machine hits every framework alike); per pair the median round by events per CPU-second.
    Faust runs one round: ~100 s each, and its bar has a wide margin. The decider rows (given
    `command_pairs`) run in each round too, after the frameworks; `args.rounds` keeps every
    round's results for the per-round ratios."""
    rounds: dict[tuple[str, str], list[Result]] = {}
    frameworks = [f for f in args.frameworks.split(",") if f]
    for round_no in range(args.repeat):
        for framework in frameworks:
            if framework == "faust" and round_no:
                continue
            for guarantee in args.guarantees:
                print(f"running {framework} {guarantee} (round {round_no + 1}) ...", flush=True)
                result = run_processor(framework, guarantee, args, round_no)
                rounds.setdefault((framework, guarantee), []).append(result)
                print(f"  {result.rate:,.0f} events/s, {result.per_cpu:,.0f} events/CPU-s "
                      f"{result.note[:200]}", flush=True)
        if command_pairs:
            for result in decider_round(args, command_pairs, per_command, round_no):
                rounds.setdefault((result.framework, result.guarantee), []).append(result)
    # per row, every round's events per CPU-second (the decider's: commands/CPU-s x events a command)
    args.rounds = {f"{f}/{g}": [r.per_cpu * (per_command if f.startswith("decider") else 1) for r in rs]
                   for (f, g), rs in rounds.items()}
    return [median_round(r) for r in rounds.values()]


def decider_floor_ratios(ctx: argparse.Namespace, guarantee: str) -> list[float]:
    """Per round: the decider's events/CPU-s over the floor loop's in the same round."""
    rounds = getattr(ctx, "rounds", {})
    decider, floor = rounds.get(f"decider/{guarantee}", []), rounds.get(f"floor/{guarantee}", [])
    return [d / f for d, f in zip(decider, floor, strict=False) if f]


def median_round(rounds: list[Result]) -> Result:
    """The median round by events per CPU-second (a failed round counts as 0), its note
    giving every round's events/CPU-s."""
    ordered = sorted(rounds, key=lambda r: r.per_cpu)
    middle = ordered[(len(ordered) - 1) // 2]
    if len(rounds) > 1:
        spread = ", ".join(f"{r.per_cpu / 1000:.1f}k" for r in rounds)
        middle.note = f"median of {len(rounds)} rounds (events/CPU-s {spread}) {middle.note}".strip()
    return middle


def run_all(args: argparse.Namespace) -> tuple[list[Result], dict | None]:
    """Input, every framework x guarantee, the decider, the restore; topics cleaned up after."""
    args.guarantees = args.guarantees.split(",")
    args.timeout = args.timeout or 60 + args.events / 500
    args.jvm_warmup = args.jvm_warmup or args.events // 4
    args.tag = uuid.uuid4().hex[:8]
    args.input = f"bench-{args.tag}-input"
    print(f"generating {args.events} events over {args.runs} runs ...", flush=True)
    pairs = generate(args.events, args.runs)
    args.shared_us, args.decode_us = shared_cost_us(pairs, args.decoder)
    print(f"mean envelope {sum(len(v) for _, v in pairs) / len(pairs):.0f} bytes; shared work "
          f"{args.shared_us:.1f} CPU-µs/event", flush=True)
    create_topics(args.bootstrap, [args.input])
    ensure_dead_letter_topic(args.bootstrap)
    produce_input(args.bootstrap, args.input, pairs)
    results = []
    try:
        command_pairs, per_command = decider_commands(args) if args.decider_commands else ([], 0.0)
        if command_pairs and "floor" in args.frameworks.split(","):
            from decider_bound import SAMPLE_COMMANDS, stage_costs, whole_runs

            print("timing the stages every decider pays (decider_bound.py) ...", flush=True)
            args.bound = stage_costs(whole_runs(command_pairs, SAMPLE_COMMANDS))
        results += run_frameworks(args, command_pairs, per_command)
        restore = restore_bench(args, pairs) if args.restore_records else None
    finally:
        if not args.keep_topics:
            cleanup(args.bootstrap, args.tag)
    return results, restore


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command")
    for command in ("restore-child", "consume-child"):
        child = sub.add_parser(command)
        for name in ("--bootstrap", "--app", "--state-dir"):
            child.add_argument(name, required=True)
    parser.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS",
                                                              "127.0.0.1:9092"))
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=1_000)
    parser.add_argument("--restore-records", type=int, default=1_000_000)
    parser.add_argument("--frameworks", default="runfacts,floor,plain,quix,faust")
    parser.add_argument("--decider-commands", type=int, default=50_000,
                        help="commands for the full run-state reduction (0: skip)")
    parser.add_argument("--decider-view", action="store_true",
                        help="the decider also publishes the user view (as the production worker)")
    parser.add_argument("--decider-signed", action="store_true",
                        help="also run the decider on signed commands, verifying each (docs/security.md)")
    parser.add_argument("--guarantees", default="at_least_once,exactly_once")
    parser.add_argument("--repeat", type=int, default=3,
                        help="rounds per framework and guarantee, reported as the median (Faust: 1)")
    parser.add_argument("--decoder", choices=("avrocode", "fastavro"), default="avrocode",
                        help="the shared Avro decoder, the same in every framework")
    parser.add_argument("--timeout", type=float, default=0, help="per run (default: by size)")
    parser.add_argument("--jvm-warmup", type=int, default=0,
                        help="kstreams: events before its measurement starts (default: a quarter of --events)")
    parser.add_argument("--keep-topics", action="store_true")
    args = parser.parse_args()
    if args.command in ("restore-child", "consume-child"):
        (restore_child if args.command == "restore-child" else consume_child)(args)
        return 0
    results, restore = run_all(args)
    return 0 if report(results, restore, args) else 1


if __name__ == "__main__":
    sys.exit(main())

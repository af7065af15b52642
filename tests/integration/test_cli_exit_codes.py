"""Every exit code the docs promise, through the installed `runfacts` console script in a real
subprocess (issue 15 item 1: `main()` dropped every command's code, so everything exited 0).

Documented codes (docs/ops.md, docs/projections.md, README, the worker and engine docstrings):
- operator commands: 0 accepted, 3 on a typed rejection;
- `audit verify`: 0 OK, 1 a broken link, 2 the records hold keyed digests and no key was given;
- `worker ...` / `engine run`: 0 stopped by SIGTERM, 1 handler or input error,
  2 configuration error, 3 infrastructure error (the broker is down);
- `runfacts demo` / `make demo`: 0 when every check holds, non-zero when one fails;
- usage errors: 2 (click).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from engine_support import EngineThread, create_topics, produce, settings
from ops_support import Deployment, waiting_run, write_users

from runfacts.dev.runscript import RunScript, encode_event, produce_log
from runfacts.logread import log_range as snapshot
from runfacts.partitioning import partition_for
from runfacts.projections.audit import reducer as audit
from runfacts.projections.audit.summary import AuditConfig
from runfacts.projections.eventlog import EventReader
from runfacts.projections.facts import ReadSettings
from runfacts.projections.projector.replay import AuditProjector
from runfacts.projections.sinks import TopicSink
from runfacts.settings import KafkaSettings
from runfacts.topics import TopicNames, TopicSpec, apply_topics, delete_topics, runfacts_topics

pytestmark = pytest.mark.integration
RUNFACTS = str(Path(sys.executable).with_name("runfacts"))
HERE = Path(__file__).parent
PARTITIONS = 2
AUDIT_KEY = "exit-code-audit-key"


def runfacts(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`.venv/bin/runfacts ARGS` as a subprocess (the console script, i.e. `runfacts.cli:main`)."""
    environment = {**os.environ, "COLUMNS": "200", **(env or {})}
    return subprocess.run([RUNFACTS, *args], env=environment, capture_output=True, text=True,
                          timeout=timeout, check=False)


# --- usage -------------------------------------------------------------------------------------

def test_usage_error_exits_2_when_an_option_is_unknown() -> None:
    done = runfacts("audit", "verify", "--no-such-option")
    assert done.returncode == 2, done.stderr
    assert "No such option" in done.stderr


# --- operator commands: 0 accepted, 3 rejected ---------------------------------------------------

@pytest.fixture(scope="module")
def deployment(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    dep = Deployment.create(kafka_bootstrap, f"rc{uuid.uuid4().hex[:10]}")
    state_dir = tmp_path_factory.mktemp("decider") / "state"
    engine = EngineThread(dep.decider(), settings(kafka_bootstrap, state_dir, f"rc-{dep.names.prefix}")).start()
    yield dep
    engine.stop()


def test_approve_exits_0_when_accepted_and_3_when_rejected(deployment: Deployment, unique: str,
                                                            tmp_path: Path) -> None:
    run, approval = f"run-{unique}", f"approval-call-{unique}"
    deployment.send(*waiting_run(run, f"call-{unique}"))
    deployment.wait_state(run, lambda s: s.status == "waiting_for_approval")
    env = deployment.env(write_users(tmp_path / "users.toml"), "alice")

    first = runfacts("approve", approval, "--run", run, env=env)
    second = runfacts("approve", approval, "--run", run, env=env)

    assert first.returncode == 0, first.stdout + first.stderr
    assert "approval.granted" in first.stdout
    assert second.returncode == 3, second.stdout + second.stderr
    assert "rejected run.resume" in second.stdout


def test_reject_exits_3_when_the_role_is_forbidden(deployment: Deployment, unique: str, tmp_path: Path) -> None:
    run = f"run-{unique}"
    deployment.send(*waiting_run(run))
    deployment.wait_state(run, lambda s: s.status == "waiting_for_approval")
    env = deployment.env(write_users(tmp_path / "users.toml"), "olga")

    done = runfacts("reject", "approval-tool-call-031", "--run", run, env=env)

    assert done.returncode == 3, done.stdout + done.stderr
    assert "[forbidden_role]" in done.stdout


# --- audit verify: 0 OK, 1 broken link, 2 key missing -------------------------------------------

@pytest.fixture
def audited(kafka_bootstrap: str, unique: str) -> Iterator[tuple[KafkaSettings, TopicNames, list[dict]]]:
    """A scripted events log and its audit trail, written with the audit key (as a keyed projector)."""
    kafka = KafkaSettings(bootstrap_servers=kafka_bootstrap, topic_prefix=f"rca{unique}")
    names = TopicNames(kafka.topic_prefix)
    specs = runfacts_topics(names, PARTITIONS)
    apply_topics(kafka, specs)
    events = list(RunScript(seed=5).log(4))
    produce_log(kafka, names.events, events, PARTITIONS)
    _audit(kafka, names.audit, names.events, events, AuditConfig(AUDIT_KEY.encode()))
    created = [s.name for s in specs]
    yield kafka, names, events
    delete_topics(kafka, created + [f"{names.events}.t", f"{names.audit}.t"])


def _audit(kafka: KafkaSettings, topic: str, events_topic: str, events: list[dict], config: AuditConfig) -> None:
    reader = EventReader(ReadSettings(decode=False))
    sink = TopicSink(kafka, TopicSpec(topic, PARTITIONS), audit.schema())
    projector, offsets = AuditProjector(config), dict.fromkeys(range(PARTITIONS), 0)
    for event in events:
        partition = partition_for(event["runId"].encode(), PARTITIONS)
        projector.apply(reader.fact(encode_event(event), events_topic, partition, offsets[partition]), sink.write)
        offsets[partition] += 1
    sink.close(snapshot(kafka, events_topic))


def _verify_env(kafka: KafkaSettings, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RUNFACTS_AUDIT_PII_KEY"}
    return {**env, "RUNFACTS_KAFKA_BOOTSTRAP_SERVERS": kafka.bootstrap_servers,
            "RUNFACTS_KAFKA_TOPIC_PREFIX": kafka.topic_prefix, "COLUMNS": "200", **extra}


def _run_clean(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([RUNFACTS, *args], env=env, capture_output=True, text=True, timeout=120, check=False)


def test_audit_verify_exits_0_when_intact_and_1_when_an_event_byte_changed(audited) -> None:
    kafka, names, events = audited
    env = _verify_env(kafka, RUNFACTS_AUDIT_PII_KEY=AUDIT_KEY)
    tampered, tampered_audit = f"{names.events}.t", f"{names.audit}.t"
    apply_topics(kafka, [TopicSpec(tampered, PARTITIONS)])
    _audit(kafka, tampered_audit, tampered, events, AuditConfig(AUDIT_KEY.encode()))  # audited while intact
    values = [encode_event(e) for e in events]
    changed = bytearray(values[7])
    changed[-3] ^= 0x01
    values[7] = bytes(changed)
    _produce(kafka, tampered, events, values)

    intact = _run_clean("audit", "verify", env=env)
    broken = _run_clean("audit", "verify", "--events-topic", tampered, "--audit-topic", tampered_audit, env=env)

    assert intact.returncode == 0, intact.stdout + intact.stderr
    assert f"OK ({len(events)} events" in intact.stdout
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert "FAILED: 1 run(s)" in broken.stdout


def test_audit_verify_exits_2_naming_the_key_when_keyed_records_are_verified_without_it(audited) -> None:
    kafka, _, _ = audited

    done = _run_clean("audit", "verify", env=_verify_env(kafka))

    assert done.returncode == 2, done.stdout + done.stderr
    assert "keyed digests" in done.stderr and "RUNFACTS_AUDIT_PII_KEY" in done.stderr
    assert "mismatch" not in done.stdout + done.stderr and "FAILED" not in done.stdout


def _produce(kafka: KafkaSettings, topic: str, events: list[dict], values: list[bytes]) -> None:
    from confluent_kafka import Producer

    producer = Producer(kafka.client_config(**{"enable.idempotence": True}))
    for event, value in zip(events, values, strict=True):
        key = event["runId"].encode()
        producer.produce(topic, value, key, partition=partition_for(key, PARTITIONS))
    assert producer.flush(30) == 0


# --- workers and the engine: 0 stopped, 1 handler error, 2 configuration, 3 infrastructure ------

def test_worker_exits_2_with_one_line_when_the_capability_manifest_is_missing() -> None:
    done = runfacts("worker", "decider", "--capabilities", "/nonexistent.toml")
    assert done.returncode == 2, done.stderr
    assert "/nonexistent.toml" in done.stderr and "Traceback" not in done.stderr


def test_worker_exits_2_naming_the_setting_when_the_versions_are_not_json() -> None:
    done = runfacts("worker", "decider", "--versions", "{bad")
    assert done.returncode == 2, done.stderr
    assert "--versions='{bad'" in done.stderr and "stateSchema" in done.stderr and "Traceback" not in done.stderr


def test_worker_exits_3_with_one_line_when_the_broker_is_down(tmp_path: Path) -> None:
    done = runfacts("worker", "projector", "--prefix", f"rcdown{uuid.uuid4().hex[:6]}",
                    env={"RUNFACTS_KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1", "RUNFACTS_STATE_DIR": str(tmp_path)})
    assert done.returncode == 3, done.stderr[-2000:]
    assert "kafka at 127.0.0.1:1" in done.stderr and "Traceback" not in done.stderr


def test_worker_exits_0_when_stopped_by_sigterm(kafka_bootstrap: str, tmp_path: Path) -> None:
    names = TopicNames(f"rcw{uuid.uuid4().hex[:8]}")
    apply_topics(KafkaSettings(bootstrap_servers=kafka_bootstrap), runfacts_topics(names, 1))
    env = {**os.environ, "RUNFACTS_KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap, "RUNFACTS_STATE_DIR": str(tmp_path),
           "RUNFACTS_AUDIT_PII_KEY": AUDIT_KEY}
    log = tmp_path / "projector.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen([RUNFACTS, "worker", "projector", "--prefix", names.prefix], env=env,
                                stdout=subprocess.DEVNULL, stderr=sink)
    try:
        _wait_for_line(log, "assigned", proc)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        delete_topics(KafkaSettings(bootstrap_servers=kafka_bootstrap),
                      [s.name for s in runfacts_topics(names, 1)])
    assert code == 0, log.read_text()[-2000:]


def test_engine_run_exits_1_when_the_handler_fails(kafka_bootstrap: str, tmp_path: Path, unique: str) -> None:
    source, output, dlq = f"rcin-{unique}", f"rcout-{unique}", f"rcdlq-{unique}"
    create_topics(kafka_bootstrap, [source, output, dlq], partitions=1)
    produce(kafka_bootstrap, source, [(b"k", b"boom")])
    env = {"RUNFACTS_KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap, "RUNFACTS_STATE_DIR": str(tmp_path)}

    done = runfacts("engine", "run", "--app", "runfacts.dev.apps:counter_app",
                    "--param", f"name=rc-{unique}", "--param", f"source={source}", "--param", f"output={output}",
                    "--param", f"dead_letter_topic={dlq}", "--param", "fail_on=boom", env=env)

    assert done.returncode == 1, done.stderr[-2000:]
    assert "handler failed" in done.stderr and "asked to fail on 'boom'" in done.stderr


def _wait_for_line(log: Path, text: str, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in log.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            raise AssertionError(f"worker exited {proc.returncode}: {log.read_text()[-2000:]}")
        time.sleep(0.2)
    raise AssertionError(f"no {text!r} in {log} within {timeout}s: {log.read_text()[-2000:]}")


# --- the demo: 0 when every check holds, 1 when one fails -----------------------------------------

def _demo(kafka_bootstrap: str, tmp_path: Path, *command: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RUNFACTS_KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap, "COLUMNS": "160",
           "TMPDIR": str(tmp_path)}
    return subprocess.run([*command, "demo", "--prefix", f"rcd-{uuid.uuid4().hex[:8]}", "--partitions", "1"],
                          env=env, capture_output=True, text=True, timeout=300, check=False)


def test_demo_exits_0_when_every_check_holds(kafka_bootstrap: str, tmp_path: Path) -> None:
    done = _demo(kafka_bootstrap, tmp_path, RUNFACTS)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "all checks hold" in done.stdout


def test_demo_exits_1_when_a_second_refund_reaches_the_provider(kafka_bootstrap: str, tmp_path: Path) -> None:
    """A refund executed outside the dispatcher (demo_rogue_refund.py, see there) breaks the
    demo's first promise, exactly one refund in the provider's ledger: the check fails for real
    and the demo, run through `runfacts.cli.main`, must exit 1."""
    done = _demo(kafka_bootstrap, tmp_path, sys.executable, str(HERE / "demo_rogue_refund.py"))
    assert done.returncode == 1, done.stdout[-4000:] + done.stderr[-2000:]
    assert "some checks FAILED" in done.stdout
    assert "2 refund(s) in the ledger" in done.stdout
    assert "Traceback" not in done.stderr

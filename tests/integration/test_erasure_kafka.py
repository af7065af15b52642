"""Right to erasure on the immutable log (issue 23), on the real broker with the real processes.

The refund demo plays with personal fields sealed at the source (the client, the UI and the
dispatcher's reports: the refund's result, `lastError` of the lost response); then the customer
is erased with `runfacts erase subject` (operator, through the run decider). Asserted: the
demo's checks hold with encryption on; no personal value any writer wrote is in clear in any
topic (events, commands, state, views, changelogs, dlq); the agent's `call.result()` is the
refund before the erasure and `[erased]` after; the erasure is a `subject.erased` fact without
the subject's id; an erasure killed between its fact and its tombstones shows in `erase status`
and is finished by running `erase subject` again, without a second fact; `audit verify` still
passes; the events topic's stored bytes and the audit replay of the demo's runs are
byte-identical before and after; and afterwards no sealed value of the customer opens with the
remaining keys.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from confluent_kafka.admin import AdminClient
from fastavro import reader as avro_reader
from ops_support import TOKENS, write_users
from rich.console import Console
from scan_support import _leaves as public_leaves
from scan_support import records, scan
from typer.testing import CliRunner

from runfacts.cli import app
from runfacts.client import Runfacts, ToolCall
from runfacts.crashpoints import arm
from runfacts.demo.run import DemoOptions, DemoResult, run_demo
from runfacts.demo.stack import DemoStack
from runfacts.logread import read_to_end
from runfacts.privacy import ERASED, KeyStore, is_protected, parse_privacy_keys, reveal_dict, subject_ref
from runfacts.privacy.keys import new_privacy_keys_json
from runfacts.processors.policy.keyring import new_secret
from runfacts.projections.audit.reducer import AuditConfig
from runfacts.projections.audit.verify import VerifySettings, verify
from runfacts.projections.projector.replay import ReplaySettings, replay
from runfacts.schemas import codec
from runfacts.schemas.pii import pii_paths, redact
from runfacts.security.identity import hash_secret
from runfacts.settings import KafkaSettings
from runfacts.topics import TopicNames, delete_topics

pytestmark = pytest.mark.integration
CUSTOMER = "customer-42"
AUDITOR_TOKEN = "ada-cli-token"


class Played(NamedTuple):
    options: DemoOptions
    result: DemoResult
    output: str


@pytest.fixture(scope="module")
def played(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Played]:
    """The refund demo with sealed personal fields (and a `cli` source key for the erasure)."""
    sources = {s: {"current": f"{s}-1", "keys": {f"{s}-1": new_secret()}}
               for s in ("agent-harness", "dashboard", "dispatcher", "cli")}
    options = DemoOptions(prefix=f"er-{uuid.uuid4().hex[:10]}", workdir=tmp_path_factory.mktemp("erasure"),
                          partitions=2, keep_topics=True, kafka=KafkaSettings(bootstrap_servers=kafka_bootstrap),
                          client_timeout_s=120.0,
                          source_keys=json.dumps(sources), privacy_keys=new_privacy_keys_json("kek-test-1"))
    out = io.StringIO()
    try:
        yield Played(options, run_demo(options, Console(file=out, width=140)), out.getvalue())
    finally:
        admin = AdminClient(options.kafka.client_config())
        mine = (options.prefix + ".", options.prefix + "-")
        delete_topics(options.kafka, sorted(t for t in admin.list_topics(timeout=10).topics if t.startswith(mine)))


def _topics(options: DemoOptions) -> list[str]:
    admin = AdminClient(options.kafka.client_config())
    mine = (options.prefix + ".", options.prefix + "-")
    return sorted(t for t in admin.list_topics(timeout=10).topics if t.startswith(mine))


def _stored(options: DemoOptions, topic: str) -> list[tuple[int, int, bytes | None]]:
    return [(r.partition, r.offset, r.value)
            for r in read_to_end(options.kafka.bootstrap_servers, [topic])[topic]]


def _at(stored: list[tuple[int, int, bytes | None]]) -> dict[tuple[int, int], bytes | None]:
    return {(p, o): v for p, o, v in stored}


def _written_plaintexts(options: DemoOptions, store: KeyStore) -> tuple[set[str], set[str]]:
    """Every personal value the client, the UI and the dispatcher wrote (revealed from the
    commands topic), minus values that also appear in fields not marked personal (service
    identities: `agent-harness` is also an authSource); and the dispatcher's among them."""
    names, found, public, reports = TopicNames(options.prefix), set(), set(), set()
    view = store.view()
    for _p, _o, value in _stored(options, names.commands):
        command = codec.decode(value)
        shown = reveal_dict(command.model_dump(mode="json"), command.commandType, view)
        raw = command.model_dump(mode="json")
        public |= public_leaves(redact(command).model_dump(mode="json"))
        for path in pii_paths(command.commandType):
            for plain, stored in zip(_leaves(shown, path), _leaves(raw, path), strict=True):
                if isinstance(plain, str) and len(plain) >= 4:
                    assert is_protected(stored), (command.commandType, path, stored)
                    found.add(plain)
                    if command.actor.authSource == "dispatcher" and path.startswith("payload."):
                        reports.add(plain)
    return found - public, reports - public


def _leaves(values: Any, path: str) -> list[Any]:
    head, _, rest = path.partition(".")
    name = head.removesuffix("[]")
    if not isinstance(values, dict) or values.get(name) is None:
        return []
    if head.endswith("[]"):
        return [leaf for item in values[name] for leaf in _leaves(item, rest)]
    return _leaves(values[name], rest) if rest else [values[name]]


def _audit_rows(options: DemoOptions, into: Path) -> list[dict[str, Any]]:
    """The audit replay of the demo's runs (the erasure's own fact left out), in order."""
    replay(options.kafka, ReplaySettings("audit", f"{into}/", TopicNames(options.prefix).events))
    rows = [row for p in sorted(into.iterdir()) if p.suffix == ".avro" for row in avro_reader(p.open("rb"))]
    return [r for r in rows if not r["event"]["runId"].startswith("erasure-")]


def _verify(options: DemoOptions) -> Any:
    names = TopicNames(options.prefix)
    return verify(options.kafka, VerifySettings(events_topic=names.events, audit_topic=names.audit,
                                                config=AuditConfig(options.audit_pii_key.encode())))


def _env(options: DemoOptions, tmp_path: Path, user: str, token: str) -> dict[str, str]:
    users = write_users(tmp_path / "users.toml")
    users.write_text(users.read_text() + f'[users.ada]\nroles = ["auditor"]\npassword = "{hash_secret("ada-pw")}"\n'
                     f'tokens = ["{hash_secret(AUDITOR_TOKEN)}"]\n')
    return {"RUNFACTS_KAFKA_BOOTSTRAP_SERVERS": options.kafka.bootstrap_servers,
            "RUNFACTS_KAFKA_TOPIC_PREFIX": options.prefix, "RUNFACTS_USERS_FILE": str(users),
            "RUNFACTS_USER": user, "RUNFACTS_TOKEN": token, "RUNFACTS_PII_KEYS": options.privacy_keys,
            "RUNFACTS_SOURCE_KEYS": options.source_env("cli")["RUNFACTS_SOURCE_KEYS"], "COLUMNS": "200"}


def _revealed_timeline(options: DemoOptions, tmp_path: Path, run_id: str, user: str = "ada") -> Any:
    """`runfacts events RUN --reveal --json` as the auditor ada (or another user)."""
    token = AUDITOR_TOKEN if user == "ada" else TOKENS[user]
    return CliRunner().invoke(app, ["events", run_id, "--reveal", "--json"], env=_env(options, tmp_path, user, token))


def _agent_result(options: DemoOptions, tmp_path: Path, run_id: str) -> Any:
    """What the agent's `call.result()` returns for the refund (a client with the privacy keys)."""
    rf = Runfacts.connect(kafka=options.kafka, prefix=options.prefix, args_store=tmp_path / "agent-args.db",
                          privacy_env={"RUNFACTS_PII_KEYS": options.privacy_keys})
    try:
        return ToolCall(rf.run(run_id), "call-order-001", "payments.refund", "", None).result(timeout=30)
    finally:
        rf.close()


ERASE = ["erase", "subject", "--subject", CUSTOMER, "--request", "ticket-erase-1", "--timeout", "60"]


def _killed_erasure(options: DemoOptions, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """`runfacts erase subject` as a process, killed (SIGKILL) after the fact, before the tombstones."""
    env = {**_env(options, tmp_path, "olga", TOKENS["olga"]), **arm("erase.after_fact_before_tombstones")}
    return subprocess.run([sys.executable, "-m", "runfacts.cli", *ERASE], env={**_os_env(), **env},
                          capture_output=True, text=True, timeout=180)


def _os_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("RUNFACTS_")}


def _erase(options: DemoOptions, tmp_path: Path) -> tuple[Any, list[Any]]:
    """The erasure, interrupted once: killed after its fact, `erase status`, `erase resume`, then the
    erasure run again (finds its fact, nothing left to tombstone)."""
    env = _env(options, tmp_path, "olga", TOKENS["olga"])
    stack = DemoStack(options)  # the demo stopped its processes: the same decider again (its state, its offsets)
    stack.start()
    try:
        killed = _killed_erasure(options, tmp_path)
        assert killed.returncode == -9, (killed.returncode, killed.stdout, killed.stderr)
        status = CliRunner().invoke(app, ["erase", "status"], env=env)
        resumed = CliRunner().invoke(app, ["erase", "resume"], env=env)
        after = CliRunner().invoke(app, ["erase", "status"], env=env)
        result = CliRunner().invoke(app, ERASE, env=env)
        deadline = time.monotonic() + 180  # the projector audits the erasure fact too
        while result.exit_code == 0 and _verify(options).findings and time.monotonic() < deadline:
            time.sleep(0.5)
        return result, [status, resumed, after]
    finally:
        stack.stop()


def test_erasure_keeps_the_log_and_audit_and_leaves_nothing_readable_when_the_customer_is_erased(
        played: Played, tmp_path: Path) -> None:
    options, names = played.options, TopicNames(played.options.prefix)
    assert [c.name for c in played.result.checks if not c.ok] == [], played.output[-4000:]
    keys = parse_privacy_keys(options.privacy_keys)
    ref = subject_ref(CUSTOMER, keys)
    store = KeyStore(options.kafka, names.keys, keys)

    # 1. sealed at the source: no personal value the client, UI or dispatcher wrote is in clear in any topic
    plain, reports = _written_plaintexts(options, store)
    assert CUSTOMER in plain and "alice" in plain and any("order-001" in v for v in plain), plain
    refund = played.result.refund.facts["result"]  # what the story's agent got from call.result()
    assert any(v.startswith("{") and json.loads(v) == refund for v in reports), reports  # the tool's result
    assert len(reports) >= 2, reports  # and the lost response's lastError
    written = {topic: records(options.kafka, topic) for topic in _topics(options)}
    needles = {v: v.encode() for v in plain}
    assert [f for topic, messages in written.items() for f in scan(topic, messages, needles)] == []
    assert written[names.keys]  # the keys topic was scanned, and holds the (wrapped) keys

    run_id = played.result.refund.run_id
    assert _agent_result(options, tmp_path, run_id) == refund  # the agent reads the sealed result back
    shown = _revealed_timeline(options, tmp_path, run_id)  # the CLI reader, through the one reveal
    assert shown.exit_code == 0 and CUSTOMER in shown.output and "[erased]" not in shown.output, shown.output
    refused = _revealed_timeline(options, tmp_path, run_id, user="olga")
    assert refused.exit_code == 1 and CUSTOMER not in refused.output and "auditor role" in str(refused.exception)

    events_before = _stored(options, names.events)
    audit_before = _audit_rows(options, tmp_path / "before")
    assert _verify(options).findings == []

    # 2. the erasure: an audited fact, then the tombstones (killed between the two once, then resumed)
    result, (status, resumed, after_status) = _erase(options, tmp_path)
    assert status.exit_code == 1 and f"subject {ref}: erasure recorded" in status.output, status.output
    assert resumed.exit_code == 0, resumed.output
    assert f"subject {ref}: " in resumed.output and "1 unfinished erasure(s) finished" in resumed.output
    assert " 0 data key(s) tombstoned" not in resumed.output, resumed.output  # resume did the tombstoning
    assert after_status.exit_code == 0 and "every recorded erasure is finished" in after_status.output
    assert result.exit_code == 0, result.output  # run again: finds its fact, sends no second one
    assert "erasure already recorded" in result.output and "0 data key(s) tombstoned" in result.output, result.output
    events_after = _at(_stored(options, names.events))
    before = _at(events_before)
    facts = [codec.decode(v) for at, v in events_after.items() if at not in before]
    erased = [e for e in facts if e.eventType == "subject.erased"]
    assert [(e.runId, e.payload.subjectRef, e.payload.requestRef) for e in erased] == [
        (f"erasure-{ref}", ref, "ticket-erase-1")]
    assert CUSTOMER.encode() not in codec.encode(erased[0])

    # 3. the log's bytes, the audit chain and the replay are unchanged
    assert {at: events_after[at] for at in before} == before  # every stored byte as it was
    report = _verify(options)
    assert report.findings == [] and report.records == report.events == len(events_after)
    assert _audit_rows(options, tmp_path / "after") == audit_before

    # 4. nothing of the customer is readable with the keys that remain (a fresh reader of the topic)
    after = KeyStore(options.kafka, names.keys, keys).view()
    assert all(r != ref for r, _d in after.secrets) and ref not in after.names
    created = next(codec.decode(v) for _p, _o, v in _stored(options, names.events)
                   if codec.decode_envelope(v).eventType == "run.created")
    shown = reveal_dict(created.model_dump(mode="json"), "run.created", after)
    assert (shown["payload"]["userId"], shown["payload"]["goalSummary"]) == (ERASED, ERASED)
    assert shown["payload"]["actor"]["subjectId"] not in (ERASED,)  # the agent (another subject) is not erased
    timeline = _revealed_timeline(options, tmp_path, run_id)
    assert timeline.exit_code == 0 and "[erased]" in timeline.output and CUSTOMER not in timeline.output
    assert _agent_result(options, tmp_path, run_id) == ERASED  # the agent's result is gone too

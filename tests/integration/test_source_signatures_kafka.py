"""Commands signed by their source (issue 20) on the real broker: the run decider holds every
source's key; an insider who may write the commands topic but holds only its own key cannot act
as the CLI's cross-tenant operator, and an outbox row edited after it was written is refused."""

from __future__ import annotations

import base64
import json
import sqlite3
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from engine_support import EngineThread, read_all, settings
from ops_support import TOKENS, write_users
from outbox_support import drop_outbox
from typer.testing import CliRunner

from runfacts.cli import app
from runfacts.client import Runfacts
from runfacts.client.sender import DirectSender
from runfacts.connectors.outbox.commands import CommandOutbox
from runfacts.connectors.relay.loop import Relay, RelaySettings
from runfacts.dev.crash.workload import Commands, refund_args
from runfacts.ops.client import CommandClient, ReaderSettings
from runfacts.partitioning import PRODUCER_PARTITIONING
from runfacts.processors.decider.app import DeciderShell
from runfacts.processors.policy.approvals import Keyring, SigningKey
from runfacts.processors.policy.keyring import ENV_SOURCE_KEYS
from runfacts.processors.policy.retry import args_hash
from runfacts.processors.policy.sources import KEY_ID_HEADER, SIGNATURE_HEADER, SourceKeys, sign
from runfacts.schemas import codec
from runfacts.schemas import commands as cmd
from runfacts.schemas.common import Actor, CommandBase
from runfacts.settings import KafkaSettings
from runfacts.topics import TopicNames, apply_topics, runfacts_topics
from runfacts.workers import decide_context

pytestmark = pytest.mark.integration

CTX = decide_context()


def _ring(kid: str, fill: bytes) -> Keyring:
    return Keyring(keys={kid: SigningKey(fill * 32)}, current=kid)


RINGS = {"cli": _ring("cli-1", b"b"), "agent-harness": _ring("agt-1", b"c"), "dispatcher": _ring("dsp-1", b"d"),
         "outbox:support-desk": _ring("desk-1", b"e")}
DECIDER_KEYS = SourceKeys(RINGS)
OWN = {source: SourceKeys({source: ring}) for source, ring in RINGS.items()}  # what each signer holds
AGENT = Actor(subjectId="agent-harness", roles=("agent",), authSource="agent-harness")
OPERATOR = Actor(subjectId="olga", roles=("operator",), authSource="cli")
FORGED_OPERATOR = Actor(subjectId="mallory", roles=("operator",), authSource="cli", tenant="tenant-b")
DESK = Actor(subjectId="desk-agent-9", roles=("support_agent",), authSource="outbox:support-desk", tenant="tenant-a")


def _stack(bootstrap: str, unique: str, tmp_path: Path) -> tuple[TopicNames, EngineThread]:
    names = TopicNames(f"sig{unique}")
    apply_topics(KafkaSettings(bootstrap_servers=bootstrap), runfacts_topics(names))
    engine = EngineThread(DeciderShell(names, CTX, sources=DECIDER_KEYS).application(),
                          settings(bootstrap, tmp_path / "state", "sig-1")).start()
    return names, engine


def _events(bootstrap: str, names: TopicNames) -> list:
    return [codec.decode(m.value()) for m in read_all(bootstrap, names.events, timeout=2)]


def _dead(bootstrap: str, names: TopicNames) -> list[dict[str, str]]:
    return [{k: v.decode() for k, v in m.headers() or []} for m in read_all(bootstrap, names.dlq, timeout=2)]


def _wait(condition, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def _create(c: Commands, run: str, actor: Actor, tenant: str) -> cmd.CreateRun:
    return c.make(cmd.CreateRun, run, actor, goalRef=f"goal:{run}", goalSummary="refund a damaged item",
                  userId="customer-42", budget={"toolCalls": 5, "steps": 50}, versions=CTX.current_versions,
                  tenant=tenant)


def _produce_raw(bootstrap: str, topic: str, records: list[tuple[CommandBase, list[tuple[str, bytes]]]]) -> None:
    """The insider: a plain producer on the commands topic, writing exactly these headers (with the
    murmur2 partitioner: a record on another partition is dead-lettered before its signature is read)."""
    producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER_PARTITIONING})
    for command, extra in records:
        producer.produce(topic, codec.encode(command), command.runId.encode(),
                         headers=[*codec.headers(command), *extra])
    assert producer.flush(30) == 0


def test_insider_without_the_cli_key_cannot_retry_cancel_or_migrate_another_tenants_run(
        kafka_bootstrap: str, unique: str, tmp_path: Path) -> None:
    names, engine = _stack(kafka_bootstrap, unique, tmp_path)
    kafka = KafkaSettings(bootstrap_servers=kafka_bootstrap)
    c = Commands(f"sig{unique}")
    run = f"run-{unique}"
    try:
        # given a tenant-a run with a proposed refund, sent by the harness with its own key
        harness = DirectSender(kafka, names, None, sources=OWN["agent-harness"])
        harness.send(_create(c, run, AGENT, "tenant-a"),
                     c.make(cmd.ProposeToolCall, run, AGENT, toolCallId="call-1", capabilityId="payments.refund",
                            argsHash=args_hash(refund_args("order-001")), argsRef="args/call-1", target="order-001",
                            action="refund", risk="high", summary="Refund 42.00 EUR"))
        harness.close()
        _wait(lambda: "approval.required" in [e.eventType for e in _events(kafka_bootstrap, names)], "the proposal")
        before = _events(kafka_bootstrap, names)

        # when an insider holding only the dispatcher's key sends retry, cancel and migrate as the
        # CLI's cross-tenant operator: unsigned, signed with its own key, with a made-up signature
        forged = [c.make(cmd.RetryToolCall, run, FORGED_OPERATOR, toolCallId="call-1"),
                  c.make(cmd.CancelRun, run, FORGED_OPERATOR, reason="forged"),
                  c.make(cmd.MigrateRun, run, FORGED_OPERATOR, versions=CTX.current_versions)]
        records = []
        for command in forged:
            records += [(command, []),
                        (command, sign(OWN["dispatcher"], "dispatcher", codec.encode(command))),
                        (command, [(KEY_ID_HEADER, b"cli-1"), (SIGNATURE_HEADER, b"A" * 43)])]
        _produce_raw(kafka_bootstrap, names.commands, records)
        _wait(lambda: len(_dead(kafka_bootstrap, names)) == 9, "nine dead letters")

        # then every one is a typed dead letter, and none of them reached the run
        dead = _dead(kafka_bootstrap, names)
        assert [d["dlq.reason"] for d in dead] == ["source_signature_missing", "source_key_unknown",
                                                   "source_signature_invalid"] * 3
        assert all(d["dlq.app"] == f"sig{unique}-run-decider" and d["dlq.reason"] in d["dlq.error"] for d in dead)

        # and the operator's own signed cancel, through the CLI's command client, is decided
        cli = CommandClient(kafka, names, settings=ReaderSettings(outcome_timeout_s=30), sources=OWN["cli"])
        cancel = c.make(cmd.CancelRun, run, OPERATOR, reason="operator cancels")
        outcome = cli.send(cancel)
        cli.close()
        assert outcome.events and outcome.rejection is None, outcome
        after = _events(kafka_bootstrap, names)
        forged_ids = {f.commandId for f in forged}
        assert not [e for e in after if e.causationId in forged_ids], "a forged command caused an event"
        assert [e.eventType for e in after[:len(before)]] == [e.eventType for e in before]
        caused = {e.causationId for e in after[len(before):]}
        assert caused == {cancel.commandId}, caused  # only the signed cancel; nothing retried or dispatched
        assert not [e for e in after if e.eventType in ("tool.call.retry_requested", "tool.call.dispatching",
                                                         "run.migrated")]
    finally:
        engine.stop()


def _tamper(db: str, table: str, command_id: str) -> bytes:
    """Change one byte of the row's stored value (inside a text, so it still decodes)."""
    if db.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(db, autocommit=True) as conn:
            (value,) = conn.execute(f"SELECT value FROM {table} WHERE event_id = %s", (command_id,)).fetchone()
            at = bytes(value).index(b"damaged")
            tampered = bytes(value)[:at] + b"D" + bytes(value)[at + 1:]
            conn.execute(f"UPDATE {table} SET value = %s WHERE event_id = %s", (tampered, command_id))
        return tampered
    conn = sqlite3.connect(db)
    (value,) = conn.execute(f"SELECT value FROM {table} WHERE event_id = ?", (command_id,)).fetchone()
    at = bytes(value).index(b"damaged")
    tampered = bytes(value)[:at] + b"D" + bytes(value)[at + 1:]
    conn.execute(f"UPDATE {table} SET value = ? WHERE event_id = ?", (tampered, command_id))
    conn.commit()
    conn.close()
    return tampered


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_outbox_row_edited_after_it_was_written_is_refused_and_the_untouched_row_is_decided(
        store: str, kafka_bootstrap: str, unique: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    names, engine = _stack(kafka_bootstrap, unique, tmp_path)
    table = f"sig_outbox_{unique}"
    db = request.getfixturevalue("postgres_dsn") if store == "postgres" else str(tmp_path / "desk.db")
    c = Commands(f"sig{unique}")
    try:
        # given a support-desk service writing two signed commands to its outbox
        desk = CommandOutbox.open(db, names, table, sources=OWN["outbox:support-desk"])
        good, edited = _create(c, f"run-a-{unique}", DESK, "tenant-a"), _create(c, f"run-b-{unique}", DESK, "tenant-a")
        desk.send(good, edited)
        desk.close()
        # when someone with write access to the table changes one byte of the second row
        tampered = _tamper(db, table, edited.commandId)
        assert codec.decode(tampered).payload.goalSummary == "refund a Damaged item"  # still a valid command
        relay = Relay(RelaySettings(db=db, bootstrap=kafka_bootstrap, table=table, exit_when_idle=True,
                                    poll_interval_s=0.05, prefix=names.prefix))
        relay.run()
        assert relay.published_total == 2
        # then the relayed untouched row is decided and the edited one is a typed dead letter
        _wait(lambda: len(_dead(kafka_bootstrap, names)) == 1 and _events(kafka_bootstrap, names), "the decider")
        assert [d["dlq.reason"] for d in _dead(kafka_bootstrap, names)] == ["source_signature_invalid"]
        assert {e.runId for e in _events(kafka_bootstrap, names)} == {good.runId}
    finally:
        engine.stop()
        if store == "postgres":
            drop_outbox(db, table)

def _env_keys(*sources: str) -> str:
    """RUNFACTS_SOURCE_KEYS JSON holding these sources' keys (the same secrets as RINGS)."""
    return json.dumps({s: {"current": RINGS[s].current, "keys": {
        kid: base64.urlsafe_b64encode(key.secret).decode() for kid, key in RINGS[s].keys.items()}} for s in sources})


def test_client_and_cli_sign_with_their_keys_from_the_environment(
        kafka_bootstrap: str, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    names, engine = _stack(kafka_bootstrap, unique, tmp_path)
    kafka = KafkaSettings(bootstrap_servers=kafka_bootstrap, topic_prefix=names.prefix)
    run_id = f"run-{unique}"
    try:
        # given the harness's process with its key in RUNFACTS_SOURCE_KEYS, as a deployment has it
        monkeypatch.setenv(ENV_SOURCE_KEYS, _env_keys("agent-harness"))
        client = Runfacts.connect(kafka=kafka, prefix=names.prefix, versions=CTX.current_versions)
        try:
            run = client.start_run(goal="goal:env", summary="refund", user_id="customer-42", run_id=run_id,
                                   budget={"toolCalls": 3, "steps": 20})
        finally:
            client.close()
        assert run.id == run_id
        # when the operator stops it with the CLI, whose process holds the cli key
        users = write_users(tmp_path / "users.toml")
        env = {"RUNFACTS_KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap, "RUNFACTS_KAFKA_TOPIC_PREFIX": names.prefix,
               "RUNFACTS_USERS_FILE": str(users), "RUNFACTS_USER": "olga", "RUNFACTS_TOKEN": TOKENS["olga"],
               ENV_SOURCE_KEYS: _env_keys("cli"), "COLUMNS": "200"}
        stopped = CliRunner().invoke(app, ["stop", run_id, "--reason", "customer withdrew"], env=env)
        # then both were decided: nothing refused
        assert stopped.exit_code == 0, stopped.output
        assert "run.cancelled" in stopped.output
        assert _dead(kafka_bootstrap, names) == []
        commands = read_all(kafka_bootstrap, names.commands, timeout=2)
        assert commands and all(dict(m.headers())[KEY_ID_HEADER] in (b"agt-1", b"cli-1") for m in commands)
    finally:
        engine.stop()

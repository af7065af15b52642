"""The run decider's shell with source keys (issue 20), on the broker-free test driver: a command
whose signature does not verify for the authSource it claims is dead-lettered with a typed
`dlq.reason` before the policy and before it touches a run; signed commands are decided."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runfacts.dev.crash.workload import OPERATOR, Commands, ticking
from runfacts.processors.decider.app import DeciderShell
from runfacts.processors.engine.testdriver import TestDriver
from runfacts.processors.policy.approvals import Keyring, SigningKey
from runfacts.processors.policy.sources import (
    KEY_ID_HEADER,
    SIGNATURE_HEADER,
    SOURCE_DENIALS,
    SourceKeys,
    check_source,
    sign,
)
from runfacts.schemas import codec
from runfacts.schemas import commands as cmd
from runfacts.schemas.common import Actor, BudgetAmounts, CommandBase
from runfacts.topics import TopicNames
from runfacts.workers import decide_context

NAMES = TopicNames("sig")
T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
T0_MS = int(T0.timestamp() * 1000)
CTX = decide_context()


def _ring(kid: str, fill: bytes, **kw) -> Keyring:
    return Keyring(keys={kid: SigningKey(fill * 32)}, current=kid, **kw)


KEYS = SourceKeys({"dashboard": _ring("dsh-1", b"a"), "cli": _ring("cli-1", b"b"),
                   "agent-harness": _ring("agt-1", b"c"), "dispatcher": _ring("dsp-1", b"d")})
DISPATCHER_ONLY = SourceKeys({"dispatcher": KEYS.keyrings["dispatcher"]})  # what an insider writer holds
TENANT_A_USER = Actor(subjectId="ana", roles=("user",), authSource="dashboard", tenant="tenant-a")
FORGED_OPERATOR = Actor(subjectId="mallory", roles=("operator",), authSource="cli", tenant="tenant-b")
logging.getLogger("runfacts.engine").setLevel(logging.ERROR)


class Harness:
    """A decider shell holding every source's keys, on a fresh test driver."""

    def __init__(self, keys: SourceKeys | None = KEYS) -> None:
        self.driver = TestDriver(DeciderShell(NAMES, CTX, sources=keys).application(), start_ms=T0_MS)
        self.commands = Commands("sig", ticking(T0, timedelta(seconds=1)))

    def pipe(self, command: CommandBase, keys: SourceKeys | None = KEYS, headers=None) -> None:
        value = codec.encode(command)
        if headers is None:
            headers = list(codec.headers(command)) + (sign(keys, command.actor.authSource, value) if keys else [])
        self.driver.pipe(NAMES.commands, value, command.runId.encode(), headers=headers)

    def events(self) -> list:
        return [codec.decode(r.value) for r in self.driver.outputs(NAMES.events)]

    def reasons(self) -> list[str]:
        return [dict(r.headers)["dlq.reason"].decode() for r in self.driver.dead_letters()]

    def run(self, run_id: str) -> dict:
        return json.loads(self.driver.read_store("runs")[run_id.encode()])

    def created(self, run_id: str = "run-a") -> Harness:
        self.pipe(self.commands.make(cmd.CreateRun, run_id, TENANT_A_USER, goalRef="goal:a", goalSummary="refund",
                                     userId="customer-1", budget={"toolCalls": 5, "steps": 50},
                                     versions=CTX.current_versions, tenant="tenant-a"))
        self.pipe(self.commands.propose(run_id, "call-1"))
        assert "approval.required" in [e.eventType for e in self.events()], self.events()
        return self


def _operator_commands(h: Harness, run_id: str) -> list[CommandBase]:
    make = h.commands.make
    return [make(cmd.RetryToolCall, run_id, FORGED_OPERATOR, toolCallId="call-1"),
            make(cmd.CancelRun, run_id, FORGED_OPERATOR, reason="forged"),
            make(cmd.MigrateRun, run_id, FORGED_OPERATOR, versions=CTX.current_versions)]


def test_forged_operator_commands_are_dead_lettered_and_never_reach_the_run():
    # given a tenant-a run waiting for approval, and a writer that holds only the dispatcher's key
    h = Harness().created()
    before, events_before = h.run("run-a"), len(h.events())
    # when it sends retry, cancel and migrate as a cross-tenant operator of the cli: unsigned,
    # signed with its own key, and with a made-up signature
    forged = _operator_commands(h, "run-a")
    for command in forged:
        h.pipe(command, keys=None)
        h.pipe(command, keys=DISPATCHER_ONLY, headers=list(codec.headers(command)) + sign(
            DISPATCHER_ONLY, "dispatcher", codec.encode(command)))
        h.pipe(command, headers=[(KEY_ID_HEADER, b"cli-1"), (SIGNATURE_HEADER, b"A" * 43)])
    # then each is a typed dead letter, no event was written and the run is as it was
    assert h.reasons() == ["source_signature_missing", "source_key_unknown", "source_signature_invalid"] * 3
    assert len(h.events()) == events_before
    assert h.run("run-a") == before


def test_operator_command_signed_by_the_cli_key_is_decided():
    h = Harness().created()
    cancel = h.commands.make(cmd.CancelRun, "run-a", OPERATOR, reason="operator cancels")
    h.pipe(cancel)
    assert h.driver.dead_letters() == []
    answer = [e.eventType for e in h.events() if e.causationId == cancel.commandId]
    assert "command.rejected" not in answer and h.run("run-a")["status"] in ("cancelling", "cancelled"), answer


def test_forged_command_does_not_squat_the_command_id_of_the_real_one():
    # given a forged cancel that copies the commandId the operator is about to use
    h = Harness().created()
    real = h.commands.make(cmd.CancelRun, "run-a", OPERATOR, reason="operator cancels")
    h.pipe(real.model_copy(update={"actor": FORGED_OPERATOR}), keys=None)
    # when the operator's signed command with that id arrives / then it is decided, not deduplicated
    h.pipe(real)
    assert h.reasons() == ["source_signature_missing"]
    assert {e.causationId for e in h.events()} >= {real.commandId}


def test_forged_create_does_not_squat_a_run_id_as_an_orphan():
    h = Harness()
    create = h.commands.make(cmd.CreateRun, "run-x", TENANT_A_USER, goalRef="goal:x", goalSummary="refund",
                             userId="customer-1", budget={"toolCalls": 5, "steps": 50},
                             versions=CTX.current_versions, tenant="tenant-a")
    h.pipe(create, keys=None)
    h.pipe(create)
    assert h.reasons() == ["source_signature_missing"]
    assert [e.eventType for e in h.events()] == ["run.created", "run.started"]


def test_replayed_signed_command_is_deduplicated():
    # given a signed cancel that was decided
    h = Harness().created()
    cancel = h.commands.make(cmd.CancelRun, "run-a", OPERATOR, reason="operator cancels")
    h.pipe(cancel)
    count = len(h.events())
    # when the same signed record is written again (a replay or redelivery)
    h.pipe(cancel)
    # then its signature still verifies and the run's dedupe by commandId answers: nothing new
    assert len(h.events()) == count and h.driver.dead_letters() == []


def test_command_signed_with_a_retired_key_is_refused_as_retired():
    h = Harness(SourceKeys({**KEYS.keyrings, "cli": Keyring(keys={"cli-2": SigningKey(b"e" * 32)}, current="cli-2",
                                                                 retired=frozenset({"cli-1"}))})).created()
    h.pipe(h.commands.make(cmd.CancelRun, "run-a", OPERATOR, reason="old key"))  # signed with KEYS' cli-1
    assert h.reasons() == ["source_key_retired"]


def test_decider_without_source_keys_decides_unsigned_commands_as_before():
    h = Harness(keys=None)
    h.pipe(h.commands.create("run-u"), keys=None)
    assert [e.eventType for e in h.events()] == ["run.created", "run.started"]


def test_timer_fire_stays_internal_with_source_keys():
    # the decider's own timers never cross the topic: an approval expires with no signature
    h = Harness().created()
    h.driver.advance(24 * 3600 * 1000)
    assert "approval.expired" in [e.eventType for e in h.events()]


@settings(max_examples=150, deadline=None, database=None)
@given(kid=st.one_of(st.none(), st.binary(max_size=70)), sig=st.one_of(st.none(), st.binary(max_size=70)),
       drop=st.sampled_from([(), (KEY_ID_HEADER,), (SIGNATURE_HEADER,)]))
def test_random_bytes_in_signature_headers_give_a_typed_dead_letter_and_the_decider_stays_up(kid, sig, drop):
    h = Harness().created()
    cancel = h.commands.make(cmd.CancelRun, "run-a", OPERATOR, reason="fuzz")
    headers = [(k, v) for k, v in [(KEY_ID_HEADER, kid), (SIGNATURE_HEADER, sig)] if k not in drop]
    h.pipe(cancel, headers=list(codec.headers(cancel)) + headers)
    assert len(h.reasons()) == 1 and h.reasons()[0] in SOURCE_DENIALS
    h.pipe(h.commands.create("canary"))  # the shell keeps deciding
    assert [e.eventType for e in h.events()][-2:] == ["run.created", "run.started"]


GOLDEN = sorted((Path(__file__).parents[2] / "contract" / "golden" / "commands").glob("*.avro"))


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.stem)
def test_records_of_every_shipped_command_version_sign_and_stay_readable(path: Path) -> None:
    # given the bytes an older (or current) writer put on the topic
    value = path.read_bytes()
    source = codec.decode(value).actor.authSource
    keys = SourceKeys({source: _ring("golden-1", b"g")})
    shell = DeciderShell(NAMES, CTX, sources=keys)
    driver = TestDriver(shell.application(), start_ms=T0_MS)
    key = codec.decode(value).runId.encode()
    # when they come unsigned to a decider with keys / then a typed refusal (timer.fire: by type)
    driver.pipe(NAMES.commands, value, key)
    [dead] = driver.dead_letters()
    reason = dict(dead.headers).get("dlq.reason")
    assert reason == (None if "FireTimer" in path.stem else b"source_signature_missing"), dead.headers
    # and signed over exactly those bytes, the signature verifies: no re-encoding is involved
    assert check_source(keys, source, value, sign(keys, source, value), T0_MS) is None


def test_cross_run_commands_are_signed_as_decider_xrun_and_decided_when_the_decider_holds_its_key() -> None:
    """Child runs with source keys (docs/decisions/0012-child-runs.md): the decider signs the
    run.create_child it sends; the receiving task verifies it like any command."""
    keys = SourceKeys({**KEYS.keyrings, "decider-xrun": _ring("xrun-1", b"x")})
    h = Harness(keys)
    parent, child = "run-sig-parent", "run-sig-child"
    h.pipe(h.commands.create(parent), keys)
    start = h.commands.make(cmd.StartChildRun, parent, childRunId=child, goalRef="goal:child", goalSummary="w",
                            budget=BudgetAmounts(steps=5, toolCalls=1))
    h.pipe(start, keys)
    [created] = [r for r in h.driver.outputs(NAMES.commands)]
    assert check_source(keys, "decider-xrun", created.value, created.headers, T0_MS) is None
    h.driver.pipe(NAMES.commands, created.value, created.key, headers=list(created.headers))

    assert "run.parent_linked" in [e.eventType for e in h.events() if e.runId == child]
    assert h.reasons() == []


def test_cross_run_commands_are_dead_lettered_as_unsigned_when_the_decider_lacks_the_xrun_key() -> None:
    h = Harness()
    parent, child = "run-sig-parent-2", "run-sig-child-2"
    h.pipe(h.commands.create(parent))
    h.pipe(h.commands.make(cmd.StartChildRun, parent, childRunId=child, goalRef="goal:child", goalSummary="w",
                           budget=BudgetAmounts(steps=5, toolCalls=1)))
    [created] = h.driver.outputs(NAMES.commands)
    h.driver.pipe(NAMES.commands, created.value, created.key, headers=list(created.headers))

    assert h.reasons() == ["source_signature_missing"]

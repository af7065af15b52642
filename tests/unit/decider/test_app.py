"""The run decider in its engine shell, through the broker-free test driver."""

from __future__ import annotations

import json
from pathlib import Path

from decider_support import (  # noqa: I001
    CTX,
    RUN,
    T0,
    claim,
    command,
    completed,
    create,
    propose_refund,
    resume,
)

from runfacts.processors.decider.app import DeciderShell, InputLimits
from runfacts.processors.decider.state import STATE_FORMAT, RunState
from runfacts.processors.engine.testdriver import InputRecord, TestDriver
from runfacts.processors.policy.retry import args_hash
from runfacts.projections.user_view import publisher, schema
from runfacts.schemas import codec
from runfacts.schemas import commands as cmd
from runfacts.schemas.common import BudgetAmounts
from runfacts.topics import TopicNames

NAMES = TopicNames("t")
T0_MS = int(T0.timestamp() * 1000)


def _driver() -> TestDriver:
    return TestDriver(DeciderShell(NAMES, CTX).application(), start_ms=T0_MS)


def _send(driver: TestDriver, *commands) -> None:
    for c in commands:
        driver.pipe(NAMES.commands, codec.encode(c), c.runId.encode())


def _event_types(driver: TestDriver) -> list[str]:
    return [codec.decode(r.value).eventType for r in driver.outputs(NAMES.events)]


def test_shell_emits_events_and_state_when_commands_arrive() -> None:
    driver = _driver()
    _send(driver, create(), propose_refund(), resume(), claim())
    assert _event_types(driver) == [
        "run.created", "run.started", "tool.call.proposed", "approval.required", "run.paused",
        "approval.granted", "tool.call.authorized", "run.resumed",
        "tool.call.dispatching", "approval.consumed", "budget.debited"]
    states = driver.outputs(NAMES.state)
    last = json.loads(states[-1].value)
    assert (last["version"], last["status"]) == (11, "running")
    assert all(r.key == RUN.encode() for r in driver.outputs(NAMES.events))


def test_shell_deduplicates_when_the_same_command_is_delivered_twice() -> None:
    driver = _driver()
    first = create()
    _send(driver, first, first)
    assert _event_types(driver) == ["run.created", "run.started"]


def test_shell_rejects_once_when_a_command_for_an_unknown_run_repeats() -> None:
    driver = _driver()
    orphan = propose_refund()
    _send(driver, orphan, orphan)
    assert _event_types(driver) == ["command.rejected"]


def test_shell_dead_letters_when_bytes_are_not_a_command() -> None:
    driver = _driver()
    driver.pipe(NAMES.commands, b"\xc3\x01garbage", RUN.encode())
    _send(driver, create())
    dead = driver.dead_letters()
    assert len(dead) == 1 and dict(dead[0].headers)["dlq.topic"] == NAMES.commands.encode()
    assert _event_types(driver) == ["run.created", "run.started"]


def test_shell_dead_letters_when_key_is_not_the_run_id() -> None:
    driver = _driver()
    c = create()
    driver.pipe(NAMES.commands, codec.encode(c), b"other-run")
    assert _event_types(driver) == []
    dead = driver.outputs(NAMES.dlq)
    assert len(dead) == 1 and b"not the command's runId" in dict(dead[0].headers)["dlq.error"]


def test_approval_expires_by_timer_when_clock_passes_expiry() -> None:
    driver = _driver()
    _send(driver, create(), propose_refund())
    assert driver.advance(10 * 60 * 1000) == 0
    fired = driver.advance(60 * 60 * 1000)
    assert fired == 1
    assert _event_types(driver)[-2:] == ["approval.expired", "run.paused"]


def test_state_survives_restart_from_changelog_when_local_store_is_lost() -> None:
    driver = _driver()
    _send(driver, create(), propose_refund())
    before = driver.read_store("runs")
    driver.restart(lose_state=True)
    assert driver.read_store("runs") == before
    _send(driver, resume())
    assert _event_types(driver)[-3:] == ["approval.granted", "tool.call.authorized", "run.resumed"]


def test_backdated_command_is_judged_at_broker_time_when_issued_at_is_too_early() -> None:
    driver = _driver()
    _send(driver, create(), propose_refund())
    expires = json.loads(driver.outputs(NAMES.state)[-1].value)["approvals"]["approval-tool-call-031"]["expiresAt"]
    late_ms = T0_MS + 3600 * 1000  # the broker receives it an hour later
    approve = resume()  # issuedAt: a few seconds after T0, well before expiry
    driver.pipe(NAMES.commands, codec.encode(approve), approve.runId.encode(), timestamp_ms=late_ms)
    last = codec.decode(driver.outputs(NAMES.events)[-1].value)
    assert last.payload.reasonCode == "approval_expired", expires


def test_shell_publishes_each_runs_last_state_and_view_once_when_a_batch_holds_several_commands() -> None:
    driver = TestDriver(DeciderShell(NAMES, CTX, views=(publisher(NAMES.user_view),)).application(),
                        start_ms=T0_MS)
    other = create(run="run-other")
    commands = [create(), other, propose_refund(), resume(), claim()]
    driver.pipe_batch([InputRecord(NAMES.commands, c.runId.encode(), codec.encode(c)) for c in commands])
    assert len(_event_types(driver)) == 13
    states = {r.key: RunState.model_validate_json(r.value) for r in driver.outputs(NAMES.state)}
    assert len(driver.outputs(NAMES.state)) == 2 and states[RUN.encode()].version == 11
    assert driver.read_store("runs")[RUN.encode()] == states[RUN.encode()].model_dump_json().encode()
    views = {r.key: schema().decode(r.value)["version"] for r in driver.outputs(NAMES.user_view)}
    assert views == {RUN.encode(): 11, b"run-other": 2}


def test_new_work_is_dead_lettered_and_results_still_decided_when_the_state_limit_is_reached() -> None:
    limits = InputLimits(max_state_bytes=12_000)
    driver = TestDriver(DeciderShell(NAMES, CTX, limits=limits).application(), start_ms=T0_MS)
    _send(driver, create(budget=BudgetAmounts(toolCalls=50, steps=500)), propose_refund(), resume(),
          claim())
    long_summary = "look up order-001 " * 200  # ~3.6 KB per proposal, kept in the run's state
    calls = [command(cmd.ProposeToolCall, toolCallId=f"tool-call-{i}", capabilityId="orders.lookup",
                     argsHash=args_hash({"orderId": f"order-{i}"}), argsRef=f"args/{i}",
                     target=f"order-{i}", action="lookup", risk="low", summary=long_summary)
             for i in range(100, 106)]
    _send(driver, *calls)
    proposed = {codec.decode(r.value).payload.toolCallId for r in driver.outputs(NAMES.events)
                if codec.decode(r.value).eventType == "tool.call.proposed"}
    refused = driver.outputs(NAMES.dlq)
    assert refused, "no proposal was refused: the test's limit is not reached"
    assert all(b"run state would grow to" in dict(r.headers)["dlq.error"] for r in refused)
    assert {codec.decode(r.value).payload.toolCallId for r in refused} == \
        {c.payload.toolCallId for c in calls} - proposed
    stored = json.loads(driver.outputs(NAMES.state)[-1].value)
    assert len(json.dumps(stored, separators=(",", ":")).encode()) <= limits.max_state_bytes

    _send(driver, completed())  # a result is never refused: the side effect happened
    assert _event_types(driver)[-1] in ("tool.call.completed", "verification.updated")
    assert json.loads(driver.outputs(NAMES.state)[-1].value)["toolCalls"]["tool-call-031"]["execution"] == \
        "completed"


def test_shell_decides_on_a_stored_state_of_the_joined_settled_calls_shape_when_upgraded() -> None:
    """Issue 18.3: a run stored by the code before settledCalls became pairs (e384e4b) is migrated
    on read; the decider goes on deciding it (before: a validation error stopped the partition)."""
    old = (Path(__file__).parents[2] / "contract" / "golden-state" / "run-state"
           / "v1-e384e4b-settledCalls-joined.json").read_bytes().strip()
    driver = _driver()
    for backend in driver.backends.values():
        backend.data["runs"][RUN.encode()] = old
    driver.restart()

    _send(driver, resume().model_copy(update={"commandId": "after-upgrade-1"}))  # not one the run has seen

    assert _event_types(driver) == ["approval.granted", "tool.call.authorized", "run.resumed"]
    stored = json.loads(driver.read_store("runs")[RUN.encode()])
    assert stored["stateFormat"] == STATE_FORMAT and stored["status"] == "running"
    assert stored["settledCalls"]["call-00000"] == ["completed/confirmed_success", json.loads(old)[
        "settledCalls"]["call-00000"].rpartition(":")[2]]

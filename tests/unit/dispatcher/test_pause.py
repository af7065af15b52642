"""A paused capability is never dispatched (docs/dispatcher.md "Paused capabilities"), on the
decider and dispatcher test drivers: the pause is the decider's `tool.paused` fact and the record it
writes to `<prefix>.tools.control` in the same transaction, folded by `runfacts.tools.control.fold`
exactly as the dispatcher's board folds the topic."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import pytest
from decider_support import CTX, OPERATOR, USER, policy_ctx

from runfacts.processors.decider.state import RunState
from runfacts.processors.decider.state_json import load_state
from runfacts.processors.dispatcher.adapters import Pause, ToolAdapter, ToolRequest
from runfacts.processors.dispatcher.core import HELD_POLL_MS
from runfacts.projections.user_view import user_view
from runfacts.schemas import codec
from runfacts.schemas import commands as cmd
from runfacts.schemas.common import Actor
from runfacts.tools.control import fold, pause_command, resume_command

from .dispatcher_support import NAMES, RUN, Loop


class TopicBoard:
    """The dispatcher's board over what the decider wrote to the control topic (as the topic reads)."""

    def __init__(self, loop: Loop) -> None:
        self.loop = loop

    def paused(self, capability_id: str) -> Pause | None:
        records = self.loop.decider.outputs(NAMES.tool_control)
        assert all(r.key == b"payments.refund" for r in records)
        return fold({}, [codec.decode(r.value) for r in records]).get(capability_id)


def _control(loop: Loop, pause: bool, actor: Actor = OPERATOR, reason: str = "provider incident INC-7") -> None:
    build = pause_command if pause else resume_command
    loop.send(build("payments.refund", reason, actor, f"ctl-{len(loop.decider.outputs(NAMES.events))}", loop.now()))


def _state(loop: Loop) -> RunState:
    return load_state(loop.decider.read_store("runs")[RUN.encode()])


def _paused_loop(tmp_path: Path) -> Loop:
    loop = Loop(tmp_path)
    loop.shell.pauses = TopicBoard(loop)
    return loop


def test_paused_capability_is_held_visibly_and_dispatched_once_when_resumed(tmp_path: Path) -> None:
    loop = _paused_loop(tmp_path)
    try:
        _control(loop, pause=True)
        loop.start_refund()  # authorized: the dispatcher would claim it now
        types = loop.types()
        assert "tool.call.held" in types and "tool.call.dispatching" not in types
        assert loop.adapter.executed == []
        held = loop.call().held
        assert (held.pausedBy, held.reason) == ("olga", "provider incident INC-7")
        view = user_view(_state(loop))
        assert view is not None
        assert view.statusLine == "Waiting: payments.refund paused by olga: provider incident INC-7"
        loop.advance(HELD_POLL_MS * 5)  # looked at again and again: still held, reported once
        assert loop.types().count("tool.call.held") == 1 and loop.adapter.executed == []
        assert loop.status() == "running"
        _control(loop, pause=False, reason="")
        loop.advance(HELD_POLL_MS)
        assert loop.call().execution == "completed" and loop.call().held is None
        assert len(loop.adapter.executed) == 1 and len(loop.sim.ledger()) == 1
        assert loop.types().count("tool.call.dispatching") == 1
        assert user_view(_state(loop)).statusLine == "Working"  # type: ignore[union-attr]
    finally:
        loop.close()


def test_pause_is_written_to_the_control_topic_with_the_fact_keyed_by_capability(tmp_path: Path) -> None:
    loop = _paused_loop(tmp_path)
    try:
        _control(loop, pause=True)
        _control(loop, pause=False, reason="fixed")
        facts = [codec.decode(r.value) for r in loop.decider.outputs(NAMES.events) if r.key == b"tools-payments.refund"]
        assert [e.eventType for e in facts] == ["tool.paused", "tool.resumed"]
        control = [codec.decode(r.value) for r in loop.decider.outputs(NAMES.tool_control)]
        assert [e.eventId for e in control] == [e.eventId for e in facts]  # the same facts, same transaction
        assert fold({}, control[:1])["payments.refund"].pause_id == facts[0].eventId
        assert fold({}, control) == {}
    finally:
        loop.close()


class Gated:
    """The refund adapter, but its first call waits for the test's gate."""

    def __init__(self, inner: ToolAdapter, gate: threading.Event, started: threading.Event) -> None:
        self.inner, self.gate, self.started = inner, gate, started

    def execute(self, request: ToolRequest) -> object:
        self.started.set()
        assert self.gate.wait(10), "the gate was never opened"
        return self.inner.execute(request)

    def lookup(self, external_request_id: str) -> object:
        return self.inner.lookup(external_request_id)

    def cancel(self, external_request_id: str) -> bool:
        return self.inner.cancel(external_request_id)


def test_pause_during_a_running_try_lets_it_complete_and_starts_no_new_attempt(tmp_path: Path) -> None:
    loop = Loop(tmp_path, pooled=True)
    loop.shell.pauses = TopicBoard(loop)
    gate, started = threading.Event(), threading.Event()
    loop.adapter.inner = Gated(loop.adapter.inner, gate, started)  # type: ignore[assignment]
    try:
        loop.start_refund(approve=False)
        loop.pipe(loop.approval())
        for _ in range(5):  # claimed and running off the transaction
            loop.step()
        assert started.wait(10) and loop.call().execution == "dispatching"
        loop.pipe(pause_command("payments.refund", "maintenance", OPERATOR, "ctl-mid", loop.now()))
        loop.step()
        gate.set()  # the started try completes after the pause ...
        loop.settle()
        assert loop.call().execution == "completed" and len(loop.sim.ledger()) == 1
        assert "tool.call.held" not in loop.types()  # ... and is reported, not held
    finally:
        gate.set()
        loop.close()


@pytest.mark.parametrize("pooled", [False, True], ids=["inline", "pooled"])
def test_an_authorization_carrying_the_lease_while_paused_is_held_not_executed(tmp_path: Path, pooled: bool) -> None:
    """Found by crash row eos-pause-during-dispatch: the decider knows the partition's dispatcher, so
    the approval dispatches at once (ADR 0011) without anyone reading the pause board; the
    dispatcher executed that `dispatching` while paused. Now it holds the unstarted try."""
    loop = Loop(tmp_path, ctx=replace(CTX, dispatcher_incarnation=1_000), pooled=pooled)
    loop.shell.pauses = TopicBoard(loop)
    try:
        _control(loop, pause=True)
        loop.start_refund()
        authorized = next(e for e in loop.events() if e.eventType == "tool.call.authorized")
        assert authorized.payload.leaseEpoch is not None  # dispatched at once, no claim
        assert loop.adapter.executed == [] and loop.sim.ledger() == []
        assert loop.types().count("tool.call.held") == 1 and loop.call().held is not None
        loop.advance(HELD_POLL_MS * 5)  # still paused: no try, no second report
        assert loop.adapter.executed == [] and loop.types().count("tool.call.held") == 1
        _control(loop, pause=False, reason="")
        loop.advance(HELD_POLL_MS)
        loop.settle()
        assert loop.call().execution == "completed" and len(loop.adapter.executed) == 1
        assert len(loop.sim.ledger()) == 1 and loop.types().count("tool.call.dispatching") == 1
    finally:
        loop.close()


def test_a_held_dispatch_of_a_run_cancelled_while_paused_never_runs(tmp_path: Path) -> None:
    loop = Loop(tmp_path, ctx=replace(CTX, dispatcher_incarnation=1_000))
    loop.shell.pauses = TopicBoard(loop)
    try:
        _control(loop, pause=True)
        loop.start_refund()  # dispatched at once, held
        assert loop.call().held is not None and loop.adapter.executed == []
        loop.send(loop.at(cmd.CancelRun, USER, reason="customer withdrew"))
        _control(loop, pause=False, reason="")
        loop.advance(HELD_POLL_MS * 3)
        loop.settle()
        assert loop.adapter.executed == [] and loop.sim.ledger() == []
        assert loop.call().execution == "failed" and loop.status() == "cancelled", (loop.types(), loop.status())
    finally:
        loop.close()


def test_retry_inside_a_claim_waits_while_paused_and_runs_after_the_resume(tmp_path: Path) -> None:
    loop = _paused_loop(tmp_path)
    try:
        loop.sim.set_faults(errorNext=1, errorStatus=503)  # the first try fails: a retry is scheduled
        loop.start_refund()
        assert loop.call().execution == "dispatching" and len(loop.adapter.executed) == 1
        _control(loop, pause=True)
        loop.advance(10_000)  # the retry falls due while paused: no new try, the call says why
        assert len(loop.adapter.executed) == 1 and loop.types().count("tool.call.held") == 1
        assert loop.call().execution == "dispatching" and loop.call().held is not None
        _control(loop, pause=False, reason="")
        loop.advance(HELD_POLL_MS)
        assert loop.call().execution == "completed" and len(loop.adapter.executed) == 2
        assert len(loop.sim.ledger()) == 1 and loop.types().count("tool.call.dispatching") == 1
    finally:
        loop.close()


def test_pause_by_a_support_agent_is_refused_naming_the_missing_role(tmp_path: Path) -> None:
    loop = Loop(tmp_path, ctx=policy_ctx())
    try:
        alice = Actor(subjectId="alice", roles=("support_agent",), authSource="cli")
        loop.send(pause_command("payments.refund", "not mine to pause", alice, "c-1", loop.now()))
        (rejected,) = [e for e in loop.events("tools-payments.refund")]
        assert rejected.eventType == "command.rejected"
        assert rejected.payload.reasonCode == "forbidden_role"
        assert "tool.pause needs the role operator" in rejected.payload.detail
        assert loop.decider.outputs(NAMES.tool_control) == []
    finally:
        loop.close()


def test_pause_of_an_unknown_capability_or_without_a_reason_is_refused(tmp_path: Path) -> None:
    loop = Loop(tmp_path)
    try:
        loop.send(pause_command("payments.refnud", "typo", OPERATOR, "c-1", loop.now()),
                  pause_command("payments.refund", "  ", OPERATOR, "c-2", loop.now()))
        codes = [(e.runId, e.payload.reasonCode, e.payload.detail) for e in
                 (codec.decode(r.value) for r in loop.decider.outputs(NAMES.events))]
        assert codes[0][:2] == ("tools-payments.refnud", "unknown_capability")
        assert "payments.refund" in codes[0][2]  # the known ones are named
        assert codes[1][:2] == ("tools-payments.refund", "reason_required")
    finally:
        loop.close()



def test_a_restarted_dispatcher_keeps_holding_then_claims_once_after_the_resume(tmp_path: Path) -> None:
    loop = _paused_loop(tmp_path)
    try:
        _control(loop, pause=True)
        loop.start_refund()
        assert loop.call().held is not None
        loop.restart_dispatcher(incarnation=2_000)  # its `held:` timer is in the store: restored
        loop.shell.pauses = TopicBoard(loop)  # the new process reads the control topic whole
        loop.advance(HELD_POLL_MS * 3)
        assert loop.types().count("tool.call.held") == 1 and loop.adapter.executed == []
        _control(loop, pause=False, reason="")
        loop.advance(HELD_POLL_MS)
        assert loop.call().execution == "completed" and len(loop.adapter.executed) == 1
        assert loop.types().count("tool.call.dispatching") == 1 and len(loop.sim.ledger()) == 1
    finally:
        loop.close()

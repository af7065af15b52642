"""The judge of crash row eos-pause-during-dispatch (`runfacts.dev.crash.pausing.pause_problems`) on
the decider and dispatcher test drivers: silent when the pause holds, and it names a refund the
dispatcher executed while paused (an authorization that carried the lease, ADR 0011)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from decider_support import CTX, OPERATOR

from runfacts.dev.crash.oracle import Expected
from runfacts.dev.crash.pausing import pause_problems
from runfacts.processors.decider.commands.run import tool_control_run_id
from runfacts.processors.decider.state_json import load_state
from runfacts.processors.dispatcher.core import HELD_POLL_MS
from runfacts.schemas import codec
from runfacts.tools.control import pause_command, resume_command

from ..dispatcher.dispatcher_support import CALL, NAMES, RUN, Loop
from ..dispatcher.test_pause import TopicBoard


def _judged(tmp_path: Path, board: bool) -> list[str]:
    """Pause, approve a refund the decider dispatches at once, resume; the judge's findings."""
    loop = Loop(tmp_path, ctx=replace(CTX, dispatcher_incarnation=1_000))
    loop.shell.pauses = TopicBoard(loop) if board else None  # None: a dispatcher blind to the pause
    try:
        loop.send(pause_command("payments.refund", "incident", OPERATOR, "ctl-1", loop.now()))
        loop.start_refund()
        loop.advance(HELD_POLL_MS * 3)
        loop.send(resume_command("payments.refund", "", OPERATOR, "ctl-2", loop.now()))
        loop.advance(HELD_POLL_MS)
        loop.settle()
        control = [codec.decode(r.value) for r in loop.decider.outputs(NAMES.events)
                   if r.key == tool_control_run_id("payments.refund").encode()]
        expected = Expected(events={RUN: loop.events(), tool_control_run_id("payments.refund"): control},
                            states={RUN: load_state(loop.decider.read_store("runs")[RUN.encode()])})
        assert loop.call().execution == "completed" and len(loop.sim.ledger()) == 1
        return pause_problems(expected, loop.sim.ledger(), [], [(RUN, CALL)])
    finally:
        loop.close()


def test_the_judge_is_silent_when_the_dispatch_waits_for_the_resume(tmp_path: Path) -> None:
    assert _judged(tmp_path, board=True) == []


def test_the_judge_names_a_refund_executed_while_paused(tmp_path: Path) -> None:
    problems = _judged(tmp_path, board=False)
    assert any(f"{CALL}: executed while paused (dispatched at once with its authorization" in p for p in problems)
    assert any("never reported held" in p for p in problems) and any("0 times after the resume" in p
                                                                      for p in problems), problems

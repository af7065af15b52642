"""The decider shell's state-size bound: no command grows a run's state JSON by more than
GROWTH_PER_BYTE per byte of its record plus GROWTH_FIXED (the shell skips measuring below it)."""

from __future__ import annotations

from decider_support import CTX, claim, command, completed, create, propose_refund, resume
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runfacts.processors.decider.app import GROWTH_FIXED, GROWTH_PER_BYTE
from runfacts.processors.decider.core import decide_evolve
from runfacts.processors.decider.state_json import dump_state
from runfacts.processors.policy.retry import args_hash
from runfacts.schemas import codec
from runfacts.schemas import commands as cmd
from runfacts.schemas.common import BudgetAmounts

# texts JSON escapes the most: control characters become \\u00XX (6 bytes for 1)
TEXT = st.text(alphabet=st.sampled_from("\x01\x1f\"\\a\u00e9"), min_size=1, max_size=600)
NAME = st.text(alphabet=st.sampled_from("Az09._-"), min_size=1, max_size=100)  # action/target rule


def _grows_within_bound(commands: list) -> None:
    state = None
    for c in commands:
        events, new = decide_evolve(c, state, CTX)
        assert events[0].eventType != "command.rejected", events[0].payload
        before = len(dump_state(state)[0]) if state is not None else 0
        after = len(dump_state(new)[0]) if new is not None else 0
        assert after - before <= GROWTH_PER_BYTE * len(codec.encode(c)) + GROWTH_FIXED, c.commandType
        state = new


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(call=TEXT, summary=TEXT, target=NAME, action=NAME, ref=TEXT, turn=TEXT, reasoning=TEXT)
def test_a_proposal_grows_the_state_within_the_bound_when_its_texts_escape_worst(
        call, summary, target, action, ref, turn, reasoning) -> None:
    proposal = command(cmd.ProposeToolCall, toolCallId=call, capabilityId="payments.refund",
                       argsHash=args_hash({"t": target}), argsRef=ref, target=target, action=action,
                       risk="high", summary=summary, turnId=turn, reasoningObjectId=reasoning)
    _grows_within_bound([create(budget=BudgetAmounts(toolCalls=50, steps=500)), proposal])


def test_the_refund_story_grows_the_state_within_the_bound_when_commands_are_ordinary() -> None:
    _grows_within_bound([create(), propose_refund(), resume(), claim(), completed()])

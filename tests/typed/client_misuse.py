"""Wrong uses of runfacts.client that `mypy --strict` MUST refuse (tests/unit/client/test_typing.py):
each line marked `# error: <code>` is an error of that code; were one accepted, the types would
no longer say what the client does."""

from __future__ import annotations

from runfacts.client import ClientCore
from runfacts.tools import ToolContext, ToolRegistry

registry = ToolRegistry("misuse")


@registry.tool("billing.refund")
def refund(order: str, ctx: ToolContext) -> int:
    return 1


def agent(rf: ClientCore) -> None:
    run = rf.start_run(goal=42, summary="s", user_id="u")  # error: arg-type
    run.propose(refund, {"order": "o-1"}, target=7)  # error: call-overload
    text: str = run.propose(refund, {"order": "o-1"}, target="o-1").result()  # error: assignment
    run.propose(refund, {"order": "o-1"}, target="o-1", riks="high")  # error: call-overload
    run.complete(outcome=1)  # error: arg-type
    rf.decide("approval-1", "approve", approver="alice")  # error: arg-type
    print(text)


async def agent_async(rf: ClientCore) -> None:
    run = await rf.start_run_async(goal="g", summary="s", user_id="u")
    late: int = await run.propose_async(refund, {"order": "o-1"}, target="o-1")  # error: assignment
    print(late)

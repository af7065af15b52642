"""`runfacts.client`: the public API an agent service (and a UI backend) is written against.

    from runfacts.client import Runfacts
    rf = Runfacts.connect(args_store="harness.db")
    run = rf.start_run(goal="ticket:T-9001", summary="Refund order-001", user_id="customer-42")
    run.reason("damaged on arrival, within 30 days", evidence=["order:order-001"])
    call = run.propose("payments.refund", {...}, target="order-001")
    value = call.result(timeout=600)          # or: await call.result_async(timeout=600)
    run.complete()

Modules — pure: `outcomes` (which facts end a wait, the result value), `approvals` (pending
approvals in plain words, what a decision binds), `timeline` (a run's facts as rows),
`errors`. `core`: every operation, once (`ClientCore`).
Shells: `client` (`Runfacts`: one process-wide client), `reader` (`StateReader`: run states and
views from the compacted topics), `run` (`Run`, `ToolCall` handles), `follower` (the ONE consumer of
the events topic that wakes every waiter), `output` (a run's partial output: chunk format, the
reader's once-per-(stream, seq) rule, who may write it, the writer),
`sender` (idempotent producer or outbox).
Naming rule: every command and every wait has a blocking form and an awaitable twin named
`<name>_async` (`await run.propose_async(...)`, `await call.result_async()`); both are one
operation (`core`: written once as steps, carried out blocking or awaited). `ClientCore` is the
type an agent function takes: `Runfacts` and `runfacts.testing`'s client both are one.
`run.propose(tool_function, ...)` types `call.result()` with the tool's return type.
"""

from runfacts.client.agents import Agent, AgentSettings
from runfacts.client.approvals import Approval, UiSettings, display_lines, masked
from runfacts.client.client import Answer, ClientSettings, Runfacts, current_versions
from runfacts.client.core import ClientCore
from runfacts.client.errors import (
    ApprovalExpired,
    ApprovalInvalidated,
    ApprovalRejected,
    BadArgument,
    ClientError,
    CommandRejected,
    ReplayDiverged,
    Revoked,
    RunCancelled,
    RunEnded,
    RunNeedsReview,
    RunNotFound,
    ToolFailed,
    WaitTimeout,
)
from runfacts.client.outcomes import Decision, result_value
from runfacts.client.output import AsyncOutputWriter, Chunk, OutputForbidden, OutputWriter
from runfacts.client.run import ProposedMemory, Run, ToolCall

__all__ = [
    "Agent", "AgentSettings", "Answer", "AsyncOutputWriter", "Chunk", "OutputForbidden", "OutputWriter",
    "Approval", "ApprovalExpired", "ApprovalInvalidated", "ApprovalRejected",
    "BadArgument",
    "ClientCore", "ClientError", "ClientSettings", "CommandRejected", "Decision", "ProposedMemory", "ReplayDiverged",
    "Revoked", "Run", "RunCancelled", "RunEnded", "RunNeedsReview", "RunNotFound", "Runfacts", "ToolCall", "ToolFailed",
    "UiSettings", "WaitTimeout", "current_versions", "display_lines", "masked", "result_value",
]

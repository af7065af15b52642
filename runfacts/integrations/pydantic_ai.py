"""Pydantic AI on runfacts: gated tool calls become runfacts proposals; resumes come from runfacts' facts.

    from runfacts.integrations.pydantic_ai import Gate, RunfactsApprovals, resume_results

    agent = Agent(model, toolsets=[tools], output_type=[str, DeferredToolRequests],
                  capabilities=[RunfactsApprovals({"refund": Gate("payments.refund", target="orderId")})])
    result = await agent.run(prompt, deps=run)                 # deps: the runfacts Run (or has .run)
    # result.output is DeferredToolRequests; metadata[id]["runfacts"]: approvalId, asks, expiresAt, argsHash
    results = await resume_results(run, result.output)         # waits for runfacts' decisions
    final = await agent.run(message_history=result.all_messages(), deferred_tool_results=results, deps=run)

A call to a gated tool (declared `requires_approval=True`, or raising `ApprovalRequired` /
`CallDeferred`) is never run in the agent: it is proposed to runfacts (`run.propose`); the
dispatcher executes the registry tool once runfacts authorized it, with its idempotency key and
reconciliation. The agent run ends with `DeferredToolRequests` carrying the runfacts approval.

`resume_results` builds `DeferredToolResults` from runfacts' facts only: granted ->
`ToolApproved` (the wrapper then returns the dispatcher's result value as the tool return; a
tool that failed becomes Pydantic AI's failed tool result, `pydantic_ai.ToolFailed`, which the
model sees), rejected -> `ToolDenied(reason)`, expired -> `ToolDenied` with the reason. A resume the client
builds itself is checked again at execution: an "approved" that runfacts does not back raises
`ForgedResume` and nothing runs; a denial or a tool result it writes for a gated call is answered
from runfacts' facts (`facts_only`): the dispatcher's result when runfacts granted the call (never
"denied" for a call that ran), runfacts' reason when it did not, `ForgedResume` while a person may
still approve it. A decider rejection of the arguments (`invalid_arguments`) is Pydantic AI's
`ModelRetry`, not an approval request. Shell (talks to runfacts through `runfacts.client`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from runfacts.integrations.errors import ForgedResume, IncompatibleFramework, OutcomeNotKnown, UngatedTool, installed

PACKAGE = "pydantic-ai-slim"
SUPPORTED = ">=2.68,<3"
_MIN, _BELOW = (2, 68), (3, 0)


def check_version(found: str | None) -> None:
    """Raise IncompatibleFramework unless `found` (pydantic-ai-slim's version) is in SUPPORTED."""
    IncompatibleFramework.check(PACKAGE, found, _MIN, _BELOW, "pydantic-ai")


def installed_version() -> str | None:
    return installed(PACKAGE)


check_version(installed_version())

from pydantic_ai import ApprovalRequired, CallDeferred, CallToolsNode, ModelRetry, RunContext  # noqa: E402
from pydantic_ai.capabilities import AbstractCapability  # noqa: E402
from pydantic_ai.exceptions import ToolFailed as FailedResult  # noqa: E402
from pydantic_ai.messages import ToolCallPart  # noqa: E402
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults, ToolApproved, ToolDenied  # noqa: E402
from pydantic_ai.toolsets import AbstractToolset, WrapperToolset  # noqa: E402
from pydantic_ai.toolsets.abstract import ToolsetTool  # noqa: E402

from runfacts.client import (  # noqa: E402
    BadArgument,
    ClientError,
    CommandRejected,
    Run,
    ToolCall,
    ToolFailed,
    WaitTimeout,
)
from runfacts.integrations import facts  # noqa: E402
from runfacts.integrations.facts import Gate  # noqa: E402
from runfacts.processors.policy.retry import args_hash  # noqa: E402

META_KEY = "runfacts"
"""The key of the runfacts approval in `DeferredToolRequests.metadata[tool_call_id]`."""


def run_from_deps(ctx: RunContext[Any]) -> Run:
    """The runfacts run of an agent run: `deps` itself, or its `run` attribute."""
    deps = ctx.deps
    run = deps if isinstance(deps, Run) else getattr(deps, "run", None)
    if not isinstance(run, Run):
        raise BadArgument("?", "deps", type(deps).__name__,
                          "pass the runfacts Run as deps= (or deps with a .run), or give run_of= to the toolset")
    return run


@dataclass
class RunfactsToolset(WrapperToolset[Any]):
    """Wraps a toolset: calls to gated tools go through runfacts, never straight to the function."""

    gates: Mapping[str, Gate] = field(default_factory=dict)
    run_of: Callable[[RunContext[Any]], Run] = run_from_deps
    result_timeout_s: float | None = 600.0
    """How long an authorized call's result is awaited inside the tool call (None: no limit)."""
    _declared: set[str] = field(default_factory=set, repr=False)

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        """The wrapped tools; a gated `requires_approval` tool becomes a plain one (this wrapper
        gates it), and one without a gate is refused (UngatedTool)."""
        tools = await super().get_tools(ctx)
        out = {}
        for name, tool in tools.items():
            if tool.tool_def.kind == "unapproved":
                if name not in self.gates:
                    raise UngatedTool(name)
                self._declared.add(name)
                tool = replace(tool, tool_def=replace(tool.tool_def, kind="function"))
            out[name] = tool
        return out

    async def call_tool(self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any],
                        tool: ToolsetTool[Any]) -> Any:
        gate = self.gates.get(name)
        if gate is None:
            try:
                return await super().call_tool(name, tool_args, ctx, tool)
            except ApprovalRequired:
                raise UngatedTool(name) from None
        run = self.run_of(ctx)
        if ctx.tool_call_approved:
            claim = (ctx.tool_call_metadata or {}).get(CLAIM_KEY) if isinstance(ctx.tool_call_metadata, dict) else None
            return await self._approved(run, name, gate, tool_args, claim)
        if name not in self._declared:
            try:
                return await super().call_tool(name, tool_args, ctx, tool)
            except (ApprovalRequired, CallDeferred):
                pass  # the tool asks for approval: runfacts decides
        return await self._propose(run, name, gate, tool_args)

    async def _propose(self, run: Run, name: str, gate: Gate, args: dict[str, Any]) -> Any:
        target = gate.target_of(args)
        try:
            call: ToolCall = await asyncio.to_thread(
                run.propose, gate.capability, args, target=target, action=gate.action_name(), risk=gate.risk,
                summary=gate.summary_of(args),
                tool_call_id=facts.call_id(run.id, gate.capability, target, args))
        except CommandRejected as exc:  # the decider refused the arguments: Pydantic AI's retry, nobody asked
            if (detail := facts.rejected_arguments(exc)) is None:
                raise
            raise ModelRetry(f"invalid arguments for {name}: {detail}") from exc
        found = self._verdict(run, gate, call.id, target)
        if found.status == "granted":  # by policy, or approved before (a re-run, the model asking again)
            return await self._result(name, call)
        raise ApprovalRequired(metadata={META_KEY: {**(found.request or {"runId": run.id, "toolCallId": call.id}),
                                                    "status": found.status, "reason": found.reason}})

    async def _approved(self, run: Run, name: str, gate: Gate, args: dict[str, Any], claim: str | None = None) -> Any:
        """A resumed call Pydantic AI says is approved: runs only if runfacts granted it. A denial
        or a result the resume claimed (`facts_only`) is answered from runfacts' facts too."""
        target = gate.target_of(args)
        call_id = facts.current_call_id(run.journal.entries, run.id, gate.capability, target, args)
        found = self._verdict(run, gate, call_id, target)
        if found.status == "granted":  # the dispatcher runs it whatever the resume says: its outcome, never "denied"
            return await self._result(name, ToolCall(run, call_id, gate.capability, args_hash(args), None))
        if claim is not None and found.status in ("rejected", "expired", "refused"):
            return ToolDenied(f"runfacts: {found.reason}")
        raise ForgedResume(run.id, call_id, name, found.status, found.reason, claim or "approved")

    async def _result(self, name: str, call: ToolCall) -> Any:
        """The dispatcher's result; a failed tool becomes Pydantic AI's failed tool result (its
        `ToolFailed`: the model sees the failure, no retry budget spent), never a second run."""
        try:
            try:
                return await call.result_async(timeout=self.result_timeout_s)
            except (ToolFailed, WaitTimeout):
                raise
            except ClientError as ended:  # authorized, then the run was cancelled, ended or needs review
                run = call.run
                return facts.settle(run.id, run.journal.entries, call.id, name, ended, run.client.keys)
        except ToolFailed as exc:
            raise FailedResult(facts.failure_text(name, exc)) from exc
        except OutcomeNotKnown as exc:  # dispatched, then the run ended: it may have happened
            raise FailedResult(str(exc)) from exc
        except WaitTimeout:
            raise
        except ClientError as exc:  # it never left: not done
            raise FailedResult(f"not done (runfacts: {exc})") from exc

    @staticmethod
    def _verdict(run: Run, gate: Gate, call_id: str, target: str) -> facts.Verdict:
        entries = run.journal.entries
        return facts.verdict(run.id, entries, call_id,
                             facts.approval_request(entries, call_id, gate.action_name(), target))


@dataclass
class RunfactsApprovals(AbstractCapability[Any]):
    """The Pydantic AI capability: wraps the agent's toolset in a `RunfactsToolset`."""

    gates: Mapping[str, Gate] = field(default_factory=dict)
    run_of: Callable[[RunContext[Any]], Run] = run_from_deps
    result_timeout_s: float | None = 600.0

    def get_wrapper_toolset(self, toolset: AbstractToolset[Any]) -> AbstractToolset[Any] | None:
        return RunfactsToolset(toolset, gates=self.gates, run_of=self.run_of, result_timeout_s=self.result_timeout_s)

    async def before_node_run(self, ctx: RunContext[Any], *, node: Any) -> Any:
        """A resume's denials and results for gated calls go through the wrapper, which answers
        them from runfacts' facts (`facts_only`), before any tool runs or the model sees them."""
        if isinstance(node, CallToolsNode) and node.tool_call_results:
            node.tool_call_metadata = facts_only(self.gates, node.model_response.tool_calls, node.tool_call_results,
                                                 node.tool_call_metadata)
        return node


CLAIM_KEY = "runfacts_claim"
"""The metadata key under which `facts_only` hands the wrapper what a resume claimed for a call."""


def facts_only(gates: Mapping[str, Gate], calls: list[ToolCallPart], results: dict[str, Any],
               metadata: dict[str, dict[str, Any]] | None) -> dict[str, dict[str, Any]]:
    """Rewrite a resume's `results` (tool call id -> ToolApproved / ToolDenied / a tool result, as
    `DeferredToolResults` gives them), in place, so that no gated call's denial or result reaches
    the model as the client wrote it: each becomes `ToolApproved()` carrying the claim ("denied",
    "a tool result") in its metadata (returned), and the wrapper answers it from runfacts' facts
    only: granted -> the dispatcher's result (or its failure), rejected / expired / refused ->
    `ToolDenied` with runfacts' reason, anything else (a person may still approve the call and it
    would run) -> ForgedResume, nothing runs and the model is told nothing."""
    out = dict(metadata or {})
    for part in calls:
        given = results.get(part.tool_call_id)
        if part.tool_name not in gates or given is None or given == "skip" or isinstance(given, ToolApproved):
            continue
        results[part.tool_call_id] = ToolApproved()
        out[part.tool_call_id] = {**out.get(part.tool_call_id, {}),
                                  CLAIM_KEY: "denied" if isinstance(given, ToolDenied) else "a tool result"}
    return out


async def resume_results(run: Run, requests: DeferredToolRequests, timeout: float | None = None) -> DeferredToolResults:
    """`DeferredToolResults` for the runfacts-gated calls of `requests`, from runfacts' facts:
    waits (up to `timeout`; WaitTimeout) until each is decided. Granted -> ToolApproved,
    rejected / expired / refused -> ToolDenied(reason). Calls without runfacts metadata are left
    out (add your own). The metadata only names the runfacts call; at execution the wrapper
    checks the call runfacts granted is exactly this one (same arguments) or raises ForgedResume."""
    approvals: dict[str, bool | ToolApproved | ToolDenied] = {}
    for part in [*requests.approvals, *requests.calls]:
        hint = requests.metadata.get(part.tool_call_id, {}).get(META_KEY)
        if not isinstance(hint, dict) or not isinstance(hint.get("toolCallId"), str):
            continue
        call: ToolCall[Any] = ToolCall(run, hint["toolCallId"], part.tool_name, "", None)
        found = facts.verdict(run.id, run.journal.entries, call.id)
        if found.status == "pending":
            try:
                await call.decision_async(timeout=timeout)
            except WaitTimeout:
                raise
            except ClientError:
                pass  # rejected, expired, invalidated, ...: the verdict below says which
            found = facts.verdict(run.id, run.journal.entries, call.id)
        approvals[part.tool_call_id] = (ToolApproved() if found.status == "granted"
                                        else ToolDenied(f"runfacts: {found.reason}"))
    return DeferredToolResults(approvals=approvals)


def resume_results_sync(run: Run, requests: DeferredToolRequests, timeout: float | None = None) -> DeferredToolResults:
    """`resume_results`, blocking."""
    return asyncio.run(resume_results(run, requests, timeout))


__all__ = ["META_KEY", "SUPPORTED", "Gate", "RunfactsApprovals", "RunfactsToolset", "check_version", "facts_only",
           "resume_results", "resume_results_sync", "run_from_deps"]

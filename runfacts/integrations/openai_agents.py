"""OpenAI Agents SDK on runfacts: `needs_approval` tools whose calls are runfacts proposals.

    from runfacts.integrations.openai_agents import Gate, gated_tools, resume_state

    gates = {"refund": Gate("payments.refund", target="orderId")}
    agent = Agent(name="refunds", model=model, tools=gated_tools([refund], gates))
    result = await Runner.run(agent, prompt, context=run)        # context: the runfacts Run (or has .run)
    while result.interruptions:                                   # the refund waits for a person
        state = await resume_state(run, result.to_state(), gates)  # runfacts' decisions, not the client's
        result = await Runner.run(agent, state)

A gated tool keeps its name, description and schema; its `needs_approval` proposes the call to
runfacts (`run.propose`, the call id derived from capability, target and arguments) and asks
for the SDK's approval while runfacts' verdict is not `granted`. Its body never runs in the
agent: once runfacts authorized the call the dispatcher executes the registry tool (idempotency
key, reconciliation) and the tool returns the dispatcher's result.

`resume_state` approves or rejects the state's interruptions from runfacts' facts only
(`facts.verdict`, as the Pydantic AI and LangGraph bridges): granted -> `state.approve`,
rejected / expired / refused -> `state.reject(rejection_message=<runfacts' reason>)`. A state
approved any other way is checked again when the tool runs: a call runfacts did not grant
raises `ForgedResume` and nothing runs. A tool that fails after its approval returns the
failure as the tool's output (the SDK's convention for an error the model should see), never
running it again. Shell (talks to runfacts through `runfacts.client`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from runfacts.integrations.errors import ForgedResume, IncompatibleFramework, UngatedTool, installed

PACKAGE = "openai-agents"
SUPPORTED = ">=0.24,<0.25"
_MIN, _BELOW = (0, 24), (0, 25)


def check_version(found: str | None) -> None:
    """Raise IncompatibleFramework unless `found` (openai-agents' version) is in SUPPORTED."""
    IncompatibleFramework.check(PACKAGE, found, _MIN, _BELOW, "openai-agents")


def installed_version() -> str | None:
    return installed(PACKAGE)


check_version(installed_version())

from agents import FunctionTool, RunContextWrapper, RunState  # noqa: E402
from agents.items import ToolApprovalItem  # noqa: E402
from agents.tool_context import ToolContext  # noqa: E402

from runfacts.client import BadArgument, ClientError, Run, ToolCall, ToolFailed, WaitTimeout  # noqa: E402
from runfacts.integrations import facts  # noqa: E402
from runfacts.integrations.facts import Gate  # noqa: E402
from runfacts.processors.policy.retry import args_hash  # noqa: E402


def run_from_context(ctx: RunContextWrapper[Any]) -> Run:
    """The runfacts run of an agent run: the `context` itself, or its `run` attribute."""
    context = ctx.context
    run = context if isinstance(context, Run) else getattr(context, "run", None)
    if not isinstance(run, Run):
        raise BadArgument("?", "context", type(context).__name__,
                          "pass the runfacts Run as Runner.run(..., context=run) (or a context with a .run)")
    return run


def gated_tools(tools: Iterable[Any], gates: Mapping[str, Gate],
                run_of: Callable[[RunContextWrapper[Any]], Run] = run_from_context,
                result_timeout_s: float | None = 600.0) -> list[Any]:
    """`tools` with each one named in `gates` replaced by its runfacts-gated copy (`gated`);
    a `needs_approval` tool without a gate is refused (UngatedTool)."""
    out = []
    for tool in tools:
        if isinstance(tool, FunctionTool) and tool.name in gates:
            out.append(gated(tool, gates[tool.name], run_of, result_timeout_s))
        elif isinstance(tool, FunctionTool) and tool.needs_approval is not False:
            raise UngatedTool(tool.name)
        else:
            out.append(tool)
    return out


def gated(tool: FunctionTool, gate: Gate, run_of: Callable[[RunContextWrapper[Any]], Run] = run_from_context,
          result_timeout_s: float | None = 600.0) -> FunctionTool:
    """A copy of `tool` (same name, description, schema) whose calls go through runfacts."""

    async def needs_approval(ctx: RunContextWrapper[Any], args: dict[str, Any], _call_id: str) -> bool:
        run = run_of(ctx)
        target = gate.target_of(args)
        call = await asyncio.to_thread(
            run.propose, gate.capability, args, target=target, action=gate.action_name(), risk=gate.risk,
            summary=gate.summary_of(args), tool_call_id=facts.call_id(run.id, gate.capability, target, args))
        return _verdict(run, gate, call.id, args).status != "granted"  # granted by policy: no approval

    async def invoke(ctx: ToolContext[Any], raw: str) -> str:
        run, args = run_of(ctx), json.loads(raw or "{}")
        call_id = facts.current_call_id(run.journal.entries, run.id, gate.capability, gate.target_of(args), args)
        found = _verdict(run, gate, call_id, args)
        if found.status != "granted":
            raise ForgedResume(run.id, call_id, tool.name, found.status, found.reason)
        call = ToolCall(run, call_id, gate.capability, args_hash(args), None)
        try:
            value = await call.result_async(timeout=result_timeout_s)
        except ToolFailed as exc:  # the model sees it as the tool's output; the call never runs again
            return facts.failure_text(tool.name, exc)
        return json.dumps(value, sort_keys=True)

    return FunctionTool(name=tool.name, description=tool.description, params_json_schema=tool.params_json_schema,
                        on_invoke_tool=invoke, strict_json_schema=tool.strict_json_schema,
                        needs_approval=needs_approval)


def _verdict(run: Run, gate: Gate, call_id: str, args: Mapping[str, Any]) -> facts.Verdict:
    entries = run.journal.entries
    return facts.verdict(run.id, entries, call_id,
                         facts.approval_request(entries, call_id, gate.action_name(), gate.target_of(args)))


def _gated_calls(run: Run, state: RunState[Any],
                 gates: Mapping[str, Gate]) -> Iterator[tuple[ToolApprovalItem, Gate, dict[str, Any], str]]:
    """The state's interruptions of gated tools: (item, gate, arguments, runfacts call id)."""
    for item in state.get_interruptions():
        gate = gates.get(item.tool_name or "")
        raw = getattr(item.raw_item, "arguments", None)
        if gate is not None and isinstance(raw, str):
            args = json.loads(raw or "{}")
            yield item, gate, args, facts.current_call_id(run.journal.entries, run.id, gate.capability,
                                                          gate.target_of(args), args)


def approval_requests(run: Run, state: RunState[Any], gates: Mapping[str, Gate]) -> dict[str, dict[str, Any]]:
    """The runfacts approval of each gated interruption (keyed by the SDK's call id), in the
    words a UI shows: approvalId, asks, expiresAt, argsHash, requiredRole, toolCallId."""
    out = {}
    for item, gate, args, call_id in _gated_calls(run, state, gates):
        request = _verdict(run, gate, call_id, args).request
        if request is not None:
            out[str(getattr(item.raw_item, "call_id", call_id))] = request
    return out


async def resume_state(run: Run, state: RunState[Any], gates: Mapping[str, Gate],
                       timeout: float | None = None) -> RunState[Any]:
    """`state` with each gated interruption approved or rejected as runfacts decided it: waits
    (up to `timeout`; WaitTimeout) for each pending decision. Interruptions of other tools are
    left for you to decide."""
    for item, gate, args, call_id in _gated_calls(run, state, gates):
        verdict = _verdict(run, gate, call_id, args)
        if verdict.status == "pending":
            try:
                await ToolCall(run, call_id, gate.capability, args_hash(args), None).decision_async(timeout=timeout)
            except WaitTimeout:
                raise
            except ClientError:
                pass  # rejected, expired, invalidated, ...: the verdict below says which
            verdict = _verdict(run, gate, call_id, args)
        if verdict.status == "granted":
            state.approve(item)
        else:
            state.reject(item, rejection_message=f"runfacts: {verdict.reason}")
    return state


__all__ = ["PACKAGE", "SUPPORTED", "Gate", "approval_requests", "check_version", "gated", "gated_tools",
           "resume_state", "run_from_context"]

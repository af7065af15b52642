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
running it again. Arguments that fail the tool's declared schema are never proposed (the output
says what is wrong). `facts_only`, as `RunConfig(call_model_input_filter=facts_only)`, gives the
model a gated call's output only from runfacts' facts (your own `state.reject` of a call runfacts
ran becomes its result). Shell (talks to runfacts through `runfacts.client`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from runfacts.integrations.errors import ForgedResume, IncompatibleFramework, OutcomeNotKnown, UngatedTool, installed

PACKAGE = "openai-agents"
SUPPORTED = ">=0.24,<0.25"
_MIN, _BELOW = (0, 24), (0, 25)


def check_version(found: str | None) -> None:
    """Raise IncompatibleFramework unless `found` (openai-agents' version) is in SUPPORTED."""
    IncompatibleFramework.check(PACKAGE, found, _MIN, _BELOW, "openai-agents")


def installed_version() -> str | None:
    return installed(PACKAGE)


check_version(installed_version())

import jsonschema  # noqa: E402
from agents import FunctionTool, RunContextWrapper, RunState  # noqa: E402
from agents.items import ToolApprovalItem  # noqa: E402
from agents.run_config import CallModelData, ModelInputData  # noqa: E402
from agents.tool_context import ToolContext  # noqa: E402

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
    """A copy of `tool` (same name, description, schema) whose calls go through runfacts.
    Arguments that fail the tool's declared schema (`params_json_schema`) are never proposed: the
    tool's output says what is wrong (the SDK's "Invalid JSON input for tool ..."), nobody is asked."""

    async def propose(run: Run, args: dict[str, Any]) -> str | None:
        """Propose the call; the decider's invalid_arguments detail instead when it refuses them."""
        target = gate.target_of(args)
        try:
            await asyncio.to_thread(
                run.propose, gate.capability, args, target=target, action=gate.action_name(), risk=gate.risk,
                summary=gate.summary_of(args), tool_call_id=facts.call_id(run.id, gate.capability, target, args))
        except CommandRejected as exc:
            if (detail := facts.rejected_arguments(exc)) is None:
                raise
            return detail
        return None

    async def needs_approval(ctx: RunContextWrapper[Any], args: dict[str, Any], _call_id: str) -> bool:
        run = run_of(ctx)
        if invalid_arguments(tool.params_json_schema, args) is not None or await propose(run, args) is not None:
            return False  # no approval: the tool's output is the validation error (invoke), nothing proposed
        call_id = facts.call_id(run.id, gate.capability, gate.target_of(args), args)
        return _verdict(run, gate, call_id, args).status != "granted"  # granted by policy: no approval

    async def invoke(ctx: ToolContext[Any], raw: str) -> str:
        run, args = run_of(ctx), json.loads(raw or "{}")
        if (detail := invalid_arguments(tool.params_json_schema, args)) is not None:
            return validation_text(tool.name, detail)
        call_id = facts.current_call_id(run.journal.entries, run.id, gate.capability, gate.target_of(args), args)
        found = _verdict(run, gate, call_id, args)
        if found.status == "unknown" and (detail := await propose(run, args)) is not None:
            return validation_text(tool.name, detail)  # the decider refused the arguments
        if found.status != "granted":
            raise ForgedResume(run.id, call_id, tool.name, found.status, found.reason)
        return await outcome(run, gate, tool.name, call_id, args, result_timeout_s)

    copy = FunctionTool(name=tool.name, description=tool.description, params_json_schema=tool.params_json_schema,
                        on_invoke_tool=invoke, strict_json_schema=tool.strict_json_schema,
                        needs_approval=needs_approval)
    copy.runfacts_gate = (gate, run_of, result_timeout_s)  # type: ignore[attr-defined]  # read by facts_only
    return copy


INVALID = "Invalid JSON input for tool"
"""How a gated tool's output starts when its arguments failed its schema (the SDK's own words)."""


def invalid_arguments(schema: Mapping[str, Any], args: Any) -> str | None:
    """What is wrong with `args` against a tool's declared JSON schema (None: they fit)."""
    found = sorted(jsonschema.Draft202012Validator(schema).iter_errors(args), key=lambda e: list(e.path))
    return "; ".join(f"{'.'.join(map(str, e.path)) or 'arguments'}: {e.message}" for e in found) or None


def validation_text(tool: str, detail: str) -> str:
    return (f"{INVALID} {tool}: {detail}. Nothing was proposed and nobody was asked; call {tool} again with "
            f"arguments that fit its schema")


async def outcome(run: Run, gate: Gate, tool: str, call_id: str, args: Mapping[str, Any],
                  timeout: float | None) -> str:
    """A granted call's output for the model: the dispatcher's result, or what failed (never run again)."""
    call: ToolCall[Any] = ToolCall(run, call_id, gate.capability, args_hash(dict(args)), None)
    try:
        try:
            value = await call.result_async(timeout=timeout)
        except (ToolFailed, WaitTimeout):
            raise
        except ClientError as ended:  # authorized, then the run was cancelled, ended or needs review
            value = facts.settle(run.id, run.journal.entries, call_id, tool, ended, run.client.keys)
    except ToolFailed as exc:  # the model sees it as the tool's output; the call never runs again
        return facts.failure_text(tool, exc)
    except OutcomeNotKnown as exc:  # dispatched, then the run ended: it may have happened
        return str(exc)
    except WaitTimeout:
        raise
    except ClientError as exc:  # it never left: not done
        return f"not done (runfacts: {exc})"
    return json.dumps(value, sort_keys=True)


async def facts_only(data: CallModelData[Any]) -> ModelInputData:
    """`RunConfig(call_model_input_filter=facts_only)`: the model sees a gated call's output only
    as runfacts' facts give it. Before each model call every `function_call_output` of a gated
    tool is checked against the facts: an output the bridge did not build from them (a
    `state.reject(...)` or `state.approve(...)` of your own, a made-up output) is replaced by the
    real one: granted -> the dispatcher's result (never "rejected" for a call that ran), rejected
    / expired / refused -> `runfacts: <reason>`. While runfacts still waits on the call (a person
    may yet approve it and it would run) it raises ForgedResume: the model is told nothing."""
    tools: dict[str, Any] = {t.name: t for t in data.agent.tools if getattr(t, "runfacts_gate", None) is not None}
    items: list[Any] = list(data.model_data.input)
    calls = {str(i.get("call_id")): i for i in items if isinstance(i, dict) and i.get("type") == "function_call"
             and i.get("name") in tools}
    if not calls:
        return data.model_data
    wrapper: RunContextWrapper[Any] = RunContextWrapper(context=data.context)
    for n, item in enumerate(items):
        call = calls.get(str(item.get("call_id"))) if isinstance(item, dict) else None
        if call is None or item.get("type") != "function_call_output":
            continue
        tool = tools[str(call["name"])]
        gate, run_of, timeout = tool.runfacts_gate
        run, args = run_of(wrapper), json.loads(call.get("arguments") or "{}")
        real = await _real_output(run, gate, tool, args, timeout, str(item.get("output")))
        if real != item.get("output"):
            items[n] = {**item, "output": real}
    return ModelInputData(input=items, instructions=data.model_data.instructions)


async def _real_output(run: Run, gate: Gate, tool: FunctionTool, args: dict[str, Any], timeout: float | None,
                       told: str) -> str:
    if (detail := invalid_arguments(tool.params_json_schema, args)) is not None:
        return validation_text(tool.name, detail)
    call_id = facts.current_call_id(run.journal.entries, run.id, gate.capability, gate.target_of(args), args)
    found = await asyncio.to_thread(_verdict, run, gate, call_id, args)
    if found.status == "granted":
        return await outcome(run, gate, tool.name, call_id, args, timeout)
    if found.status in ("rejected", "expired", "refused"):
        return f"runfacts: {found.reason}"
    if found.status == "unknown" and told.startswith(f"{INVALID} {tool.name}:"):
        return told  # the decider refused the arguments: never proposed, nothing ran or can
    raise ForgedResume(run.id, call_id, tool.name, found.status, found.reason, "a tool result")


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


__all__ = ["PACKAGE", "SUPPORTED", "Gate", "approval_requests", "check_version", "facts_only", "gated", "gated_tools",
           "invalid_arguments", "resume_state", "run_from_context"]

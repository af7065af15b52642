"""Handles on a run and its tool calls: what an agent calls between its own model steps.

Every method that changes a run waits for the run decider's answer and returns the version it
committed (read-your-writes: `run.view(min_version=v)` waits until the view shows it); a
refusal raises `CommandRejected(reason)`. Waits come in two forms with one naming rule: the
blocking method (`call.result(timeout=...)`) and its awaitable twin with an `_async` suffix
(`await call.result_async(timeout=...)`); both are woken by the client's one follower.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, TypedDict, TypeVar, Unpack, overload

from runfacts.client import outcomes
from runfacts.client.errors import BadArgument
from runfacts.client.outcomes import Decision
from runfacts.processors.decider.commands.memory import SCOPE_KINDS, candidate_hash
from runfacts.processors.decider.state import EVIDENCE_TYPES
from runfacts.processors.policy.capabilities import TOOL_MARK
from runfacts.processors.policy.retry import args_hash
from runfacts.schemas import commands as cmd
from runfacts.schemas.common import Actor, BudgetAmounts, CommandBase

if TYPE_CHECKING:
    from runfacts.client.agents import Replay
    from runfacts.client.core import ClientCore, Steps
    from runfacts.client.follower import Journal

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)

_REF = re.compile(r"^[^\s]{1,256}$")
_ERROR_CLASS = re.compile(r"^[a-z][a-z0-9_]*$")
BUDGET_FIELDS = tuple(BudgetAmounts.model_fields)


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def budget_amounts(run_id: str, name: str, value: BudgetAmounts | Mapping[str, int] | None) -> BudgetAmounts:
    """`value` as BudgetAmounts; BadArgument naming the unknown dimension or bad amount."""
    if value is None:
        return BudgetAmounts()
    if isinstance(value, BudgetAmounts):
        return value
    unknown = sorted(set(value) - set(BUDGET_FIELDS))
    if unknown:
        raise BadArgument(run_id, f"{name}[{unknown[0]!r}]", value[unknown[0]],
                          f"unknown budget dimension; use {', '.join(BUDGET_FIELDS)}")
    for key, amount in value.items():
        if not isinstance(amount, int) or isinstance(amount, bool) or amount < 0:
            raise BadArgument(run_id, f"{name}[{key!r}]", amount, "must be a whole number >= 0")
    return BudgetAmounts(**value)


def _refs(run_id: str, name: str, values: Iterable[str]) -> tuple[str, ...]:
    out = tuple(values) if not isinstance(values, str) else (values,)
    for value in out:
        if not isinstance(value, str) or not _REF.match(value):
            raise BadArgument(run_id, name, value, "must be references such as 'order:order-001' (no spaces, "
                                                   "at most 256 characters), never the text itself")
    return out


def _arguments(run_id: str, capability: str, args: Any) -> dict[str, Any]:
    if not isinstance(args, Mapping):
        raise BadArgument(run_id, "args", args, f"the arguments of {capability} must be a dict")
    for key, value in args.items():
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise BadArgument(run_id, f"args[{key!r}]", value,
                              f"not JSON ({exc}); arguments are stored as JSON") from exc
    return dict(args)


def memory_scope(run_id: str, scope: Any) -> tuple[str, str, str]:
    """(tenant, kind, id) of a scope given as `(tenant, "capability:<id>" | "topic:<name>")`."""
    if not isinstance(scope, tuple) or len(scope) != 2 or not all(isinstance(v, str) and v for v in scope):
        raise BadArgument(run_id, "scope", scope, "must be (tenant, 'capability:<id>' or 'topic:<name>')")
    tenant, about = scope
    kind, _, name = about.partition(":")
    if kind not in SCOPE_KINDS or not name:
        raise BadArgument(run_id, "scope", scope, "the second part is 'capability:<id>' or 'topic:<name>'")
    return tenant, kind, name


def _expiry(run_id: str, expires: Any) -> datetime:
    if isinstance(expires, timedelta) and expires > timedelta(0):
        return datetime.now(UTC) + expires
    if isinstance(expires, datetime) and expires.tzinfo is not None:
        return expires
    raise BadArgument(run_id, "expires", expires, "is mandatory: a timedelta > 0 from now or an aware datetime")


@dataclass(frozen=True)
class ProposedMemory:
    """A memory candidate on the log: a reviewer's `memory.review` promotes or rejects it."""

    id: str
    version: int | None
    candidate_hash: str
    """What a reviewer's decision binds to (`Runfacts.review_memory`)."""
    tenant: str


class ProposeOptions(TypedDict, total=False):
    """The optional keywords of `Run.propose`."""

    action: str | None
    summary: str | None
    tool_call_id: str | None
    risk: str
    business_key: str | None
    actor: Actor | None


def capability_of(run_id: str, capability: object) -> str:
    """A capability id, or the one `ToolRegistry.tool` stamped on a tool function."""
    if isinstance(capability, str):
        return capability
    found = getattr(capability, TOOL_MARK, None)
    if not isinstance(found, str):
        raise BadArgument(run_id, "capability", capability, "pass a capability id ('payments.refund') or a function "
                                                            "registered with @registry.tool")
    return found


class ToolCall(Generic[T_co]):
    """One proposed tool call: wait for its decision and its result (`T_co`: the tool's declared
    return type when proposed through its function, else Any)."""

    def __init__(self, run: Run, tool_call_id: str, capability: str, args_hash: str, version: int | None) -> None:
        self.run, self.id, self.capability, self.args_hash = run, tool_call_id, capability, args_hash
        self.version = version
        """The run's version once the proposal was decided (None: re-attached)."""

    def __repr__(self) -> str:
        return f"ToolCall({self.run.id!r}, {self.id!r}, {self.capability!r})"

    @property
    def approval_id(self) -> str | None:
        """The approval the call asked for, if the policy required one."""
        found = outcomes.pending_approval(self.run.journal.entries, self.id)
        return None if found is None else found.payload.approvalId

    def _result_check(self, journal: Journal) -> outcomes.Resolved | None:
        return outcomes.call_result(self.run.id, journal.entries, self.id, self.run.client.keys)

    def _decision_check(self, journal: Journal) -> outcomes.Resolved | None:
        return outcomes.call_decision(self.run.id, journal.entries, self.id)

    def _result(self, timeout: float | None) -> Steps[T_co]:
        client = self.run.client
        value = yield from client.waits(self.run, self._result_check, "result", timeout, self.id)
        return client.typed(self.capability, value)  # type: ignore[no-any-return]

    def _decision(self, timeout: float | None) -> Steps[Decision]:
        found: Decision = yield from self.run.client.waits(self.run, self._decision_check, "decision", timeout,
                                                           self.id)
        return found

    def result(self, timeout: float | None = None) -> T_co:
        """The tool's result value, once the call completed (or reconciliation found it completed):
        its declared return type when the client knows the tool's registry, else the JSON value.
        Raises ApprovalRejected, ApprovalExpired, ToolFailed, RunNeedsReview, RunCancelled, WaitTimeout."""
        return self.run.client.drive(self._result(timeout))

    async def result_async(self, timeout: float | None = None) -> T_co:
        """`result`, awaitable."""
        return await self.run.client.drive_async(self._result(timeout))

    def decision(self, timeout: float | None = None) -> Decision:
        """How the call was authorized (policy or approver), once it is; the same errors as `result`."""
        return self.run.client.drive(self._decision(timeout))

    async def decision_async(self, timeout: float | None = None) -> Decision:
        """`decision`, awaitable."""
        return await self.run.client.drive_async(self._decision(timeout))


@dataclass
class Run:
    """A run on the log. Obtain one from `Runfacts.start_run`, `run` or `open_runs`.

    Every method that changes the run has an awaitable twin, `<name>_async`."""

    client: ClientCore
    id: str
    journal: Journal
    version: int | None = None
    """The version the decider committed for this handle's latest change."""
    reasoning_id: str | None = None
    """The latest reasoning recorded through this handle (proposals link to it)."""
    replay: Replay | None = None
    """Set when an agent owns the run (`runfacts.client.agents`): its commands are numbered steps,
    and a step the run's facts already record returns the recorded answer."""

    @property
    def goal(self) -> str:
        """The goal the run was created with (a reference to its task, e.g. `ticket:T-9001`)."""
        return self.client.goal_of(self)

    def _send(self, command_cls: type[CommandBase], **payload: Any) -> Steps[int | None]:
        version = (yield from self.client.sends(self, command_cls, payload)).version
        if version is not None:  # None: queued in an outbox transaction, not decided yet
            self.version = version
        return version

    def _reason(self, conclusion: str, evidence: Iterable[str], goal: str | None, ref: str | None,
                reasoning_id: str | None) -> Steps[int | None]:
        if not isinstance(conclusion, str) or not conclusion:
            raise BadArgument(self.id, "conclusion", conclusion, "must be a non-empty string (only its hash is sent)")
        digest = sha256(conclusion)
        rid = reasoning_id or f"reasoning-{digest[:16]}"
        version = yield from self._send(cmd.RecordReasoning, reasoningObjectId=rid,
                                        goalRef=goal or self.client.goal_of(self),
                                        evidenceRefs=_refs(self.id, "evidence", evidence), conclusionHash=digest,
                                        conclusionRef=None if ref is None else _refs(self.id, "ref", (ref,))[0])
        self.reasoning_id = rid
        return version

    def reason(self, conclusion: str, evidence: Iterable[str] = (), *, goal: str | None = None,
               ref: str | None = None, reasoning_id: str | None = None) -> int | None:
        """Record why: the conclusion's sha256 and `ref` (where your service keeps the text), the
        evidence refs; never the text itself. Later proposals link to it. Returns the version."""
        return self.client.drive(self._reason(conclusion, evidence, goal, ref, reasoning_id))

    async def reason_async(self, conclusion: str, evidence: Iterable[str] = (), *, goal: str | None = None,
                           ref: str | None = None, reasoning_id: str | None = None) -> int | None:
        """`reason`, awaitable."""
        return await self.client.drive_async(self._reason(conclusion, evidence, goal, ref, reasoning_id))

    def _propose(self, capability: object, args: Mapping[str, Any], target: str,
                 options: ProposeOptions) -> Steps[ToolCall[Any]]:
        capability_id = capability_of(self.id, capability)
        arguments = _arguments(self.id, capability_id, args)
        digest = args_hash(arguments)
        call_id = options.get("tool_call_id") or f"call-{sha256(f'{self.id}|{capability_id}|{target}|{digest}')[:20]}"
        action = options.get("action") or capability_id.rsplit(".", 1)[-1]
        fields = {"capabilityId": capability_id, "reasoningObjectId": self.reasoning_id, "target": target,
                  "action": action, "risk": options.get("risk", "medium"),
                  "summary": options.get("summary") or f"{action} {target}", "businessKey": options.get("business_key")}
        return (yield from self.client.proposes(self, capability_id, arguments, call_id, fields, options.get("actor")))

    @overload
    def propose(self, capability: str, args: Mapping[str, Any], *, target: str,
                **options: Unpack[ProposeOptions]) -> ToolCall[Any]: ...

    @overload
    def propose(self, capability: Callable[..., Awaitable[T]], args: Mapping[str, Any], *, target: str,  # type: ignore[overload-overlap]
                **options: Unpack[ProposeOptions]) -> ToolCall[T]: ...

    @overload
    def propose(self, capability: Callable[..., T], args: Mapping[str, Any], *, target: str,
                **options: Unpack[ProposeOptions]) -> ToolCall[T]: ...

    def propose(self, capability: object, args: Mapping[str, Any], *, target: str,
                **options: Unpack[ProposeOptions]) -> ToolCall[Any]:
        """Propose a side effect: the arguments go to the argument store, their hash on the log.
        `capability`: its id, or the tool function itself (registered with `@registry.tool`):
        then `result()` is typed with the function's return type.
        The default toolCallId is derived from (capability, target, arguments), so proposing the
        same call again (after a restart) returns the same call, never a second one.
        `business_key` (e.g. "ticket:T-9001") is sent to the tool as its idempotency key instead
        of the per-run key, so the provider dedupes across runs of the tenant; a second live call
        with that key in this run is refused (CommandRejected "duplicate_business_key").
        `actor`: who proposes, when not this client's agent (an MCP client, runfacts.mcp).
        Other options: `action`, `summary`, `tool_call_id`, `risk` (default "medium")."""
        return self.client.drive(self._propose(capability, args, target, options))

    @overload
    async def propose_async(self, capability: str, args: Mapping[str, Any], *, target: str,
                            **options: Unpack[ProposeOptions]) -> ToolCall[Any]: ...

    @overload
    async def propose_async(self, capability: Callable[..., Awaitable[T]], args: Mapping[str, Any], *,  # type: ignore[overload-overlap]
                            target: str, **options: Unpack[ProposeOptions]) -> ToolCall[T]: ...

    @overload
    async def propose_async(self, capability: Callable[..., T], args: Mapping[str, Any], *, target: str,
                            **options: Unpack[ProposeOptions]) -> ToolCall[T]: ...

    async def propose_async(self, capability: object, args: Mapping[str, Any], *, target: str,
                            **options: Unpack[ProposeOptions]) -> ToolCall[Any]:
        """`propose`, awaitable."""
        return await self.client.drive_async(self._propose(capability, args, target, options))

    def evidence(self, *event_types: str) -> list[str]:
        """Event ids of this run's evidence-grade facts in its journal (`tool.call.completed`,
        `verification.updated`, `reasoning.recorded`, ...), optionally only of `event_types`."""
        wanted = set(event_types) or EVIDENCE_TYPES
        return [e.event.eventId for e in self.journal.entries if e.event_type in wanted & EVIDENCE_TYPES]

    def _propose_memory(self, statement_ref: str, evidence: Iterable[str], scope: tuple[str, str],
                        expires: datetime | timedelta, statement_hash: str | None, summary: str | None,
                        memory_id: str | None) -> Steps[ProposedMemory]:
        ref = _refs(self.id, "statement_ref", (statement_ref,))[0]
        tenant, kind, name = memory_scope(self.id, scope)
        refs = _refs(self.id, "evidence", evidence)
        mid = memory_id or f"memory-{sha256(f'{self.id}|{ref}|{tenant}|{kind}:{name}')[:20]}"
        payload: dict[str, Any] = {"memoryId": mid, "statementRef": ref, "statementHash": statement_hash or sha256(ref),
                   "evidence": refs, "scopeTenant": tenant, "scopeKind": kind, "scopeId": name,
                   "expiresAt": _expiry(self.id, expires), "summary": summary}
        digest = candidate_hash(self.id, cmd.ProposeMemoryPayload(**payload))
        return ProposedMemory(mid, (yield from self._send(cmd.ProposeMemory, **payload)), digest, tenant)

    def propose_memory(self, statement_ref: str, *, evidence: Iterable[str], scope: tuple[str, str],
                       expires: datetime | timedelta, statement_hash: str | None = None,
                       summary: str | None = None, memory_id: str | None = None) -> ProposedMemory:
        """Propose what the run learned as a memory candidate: `statement_ref` (where your service
        keeps the statement; never its text), `evidence` (event ids of this run, e.g. from
        `evidence()`), `scope` (`(tenant, "capability:<id>")` or `(tenant, "topic:<name>")`, the
        run's tenant) and a mandatory `expires`. Only a reviewer's decision makes it memory.
        `statement_hash` defaults to the ref's sha256. Raises CommandRejected (`evidence_required`,
        `scope_tenant_mismatch`, `expiry_in_past`, `memory_exists`)."""
        return self.client.drive(self._propose_memory(statement_ref, evidence, scope, expires, statement_hash,
                                                      summary, memory_id))

    async def propose_memory_async(self, statement_ref: str, *, evidence: Iterable[str], scope: tuple[str, str],
                                   expires: datetime | timedelta, statement_hash: str | None = None,
                                   summary: str | None = None, memory_id: str | None = None) -> ProposedMemory:
        """`propose_memory`, awaitable."""
        return await self.client.drive_async(self._propose_memory(statement_ref, evidence, scope, expires,
                                                                  statement_hash, summary, memory_id))

    def start_child(self, *, goal: str, summary: str, budget: BudgetAmounts | Mapping[str, int],
                    run_id: str | None = None, timeout: float | None = None) -> Run:
        """Start a child run (a parallel worker) with `budget` reserved from this run's remaining
        budget (`Runfacts.start_child`); its unspent part returns here when it ends."""
        return self.client.start_child(self, goal=goal, summary=summary, budget=dict(budget)
                                       if isinstance(budget, Mapping) else budget, run_id=run_id, timeout=timeout)

    def append_evidence(self, evidence_id: str, content_hash: str, ref: str) -> int | None:
        """Append a piece of evidence under this run's id (append-only: the same id again is
        refused, `evidence_exists`); a parent merges its children's on their ends."""
        for name, value in (("evidence_id", evidence_id), ("content_hash", content_hash), ("ref", ref)):
            if not isinstance(value, str) or not value.strip():
                raise BadArgument(self.id, name, value, "must be a non-empty string")
        return self.client.drive(self._send(cmd.AppendEvidence, evidenceId=evidence_id, hash=content_hash, ref=ref))

    def child_report(self, child: Run | str, timeout: float | None = None) -> Any:
        """Wait for a child's end as this run folded it: `.status`, `.used`, `.released`."""
        return self.client.child_report(self, child if isinstance(child, str) else child.id, timeout)

    def complete(self, outcome: str | None = None) -> int | None:
        """End the run successfully (`outcome`: a ref to what it produced). Returns the version."""
        return self.client.drive(self._send(cmd.CompleteRun, outcomeRef=outcome))

    async def complete_async(self, outcome: str | None = None) -> int | None:
        """`complete`, awaitable."""
        return await self.client.drive_async(self._send(cmd.CompleteRun, outcomeRef=outcome))

    def _fail(self, error_class: str, detail: str) -> Steps[int | None]:
        if not isinstance(error_class, str) or not _ERROR_CLASS.match(error_class):
            raise BadArgument(self.id, "error_class", error_class, "lower case letters, digits and _, e.g. 'tool_down'")
        return (yield from self._send(cmd.FailRun, errorClass=error_class, detail=detail))

    def fail(self, error_class: str, detail: str = "") -> int | None:
        """End the run in failure; `error_class` like `model_refused` (lower case, underscores)."""
        return self.client.drive(self._fail(error_class, detail))

    async def fail_async(self, error_class: str, detail: str = "") -> int | None:
        """`fail`, awaitable."""
        return await self.client.drive_async(self._fail(error_class, detail))

    def _debit(self, action: str, amounts: Mapping[str, int]) -> Steps[int | None]:
        return (yield from self._send(cmd.DebitBudget, amounts=budget_amounts(self.id, "amounts", amounts),
                                      actionHash=sha256(f"{self.id}|{action}")))

    def debit(self, action: str = "model_step", **amounts: int) -> int | None:
        """Debit budget for a model or tool step (`tokens=812, costMicros=1200`, ...). Over budget
        the run needs review and this raises RunNeedsReview."""
        return self.client.drive(self._debit(action, amounts))

    async def debit_async(self, action: str = "model_step", **amounts: int) -> int | None:
        """`debit`, awaitable."""
        return await self.client.drive_async(self._debit(action, amounts))

    def _progress(self, next_safe_action: str, verified: Iterable[str], open_items: Iterable[str]) -> Steps[int | None]:
        return (yield from self._send(cmd.UpdateProgress, verifiedItems=tuple(verified), openItems=tuple(open_items),
                                      nextSafeAction=next_safe_action))

    def progress(self, next_safe_action: str, verified: Iterable[str] = (),
                 open_items: Iterable[str] = ()) -> int | None:
        """Update the Progress Contract: verified items, open items, next safe action."""
        return self.client.drive(self._progress(next_safe_action, verified, open_items))

    async def progress_async(self, next_safe_action: str, verified: Iterable[str] = (),
                             open_items: Iterable[str] = ()) -> int | None:
        """`progress`, awaitable."""
        return await self.client.drive_async(self._progress(next_safe_action, verified, open_items))

    def view(self, role: str = "user", min_version: int | None = None, timeout: float | None = None) -> dict[str, Any]:
        """The run's `role` view (user: as the decider published it on the view topic), once it
        reflects at least `min_version` (default: this handle's latest change)."""
        return self.client.view(self.id, role, self.version if min_version is None else min_version, timeout)

    async def view_async(self, role: str = "user", min_version: int | None = None,
                         timeout: float | None = None) -> dict[str, Any]:
        """`view`, awaitable."""
        return await self.client.view_async(self.id, role, self.version if min_version is None else min_version,
                                            timeout)

    def calls(self) -> list[ToolCall[Any]]:
        """The run's tool calls as its state holds them, oldest first (after a restart: what to wait
        for; `result()` answers at once for a call that finished while the agent was down). Calls
        closed without running, and settled calls the state compacted, are not listed."""
        return self.client.pending_calls(self)

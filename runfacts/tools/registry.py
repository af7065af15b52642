"""`ToolRegistry`: decorated tool functions, the capability manifest, the dispatcher's adapters.

    registry = ToolRegistry()

    @registry.tool("billing.credit", risk="high", required_role="support_agent",
                   approval_when=[("amount_minor", ">", 5_000)])
    def credit(account: str, amount_minor: Annotated[int, Field(le=100_000, json_schema_extra={"unit": "cents"})],
               customer: Annotated[str, Field(json_schema_extra={"pii": True})], ctx: ToolContext) -> Credit: ...

    @registry.lookup("billing.credit")
    def find_credit(ctx: LookupContext) -> Credit | None: ...

Each tool's manifest carries its argument JSON schema (from the argument model: names, types,
bounds, and `unit` / `pii` declared in `json_schema_extra`) and its approval rule
(`approval_when`: conditions `(field, op, value)`, any of which asks; `needs_approval=True`
asks for every call): the decider validates a proposal's displayed arguments and evaluates
the rule on them (docs/tools.md, "What the approver sees").

`registry.catalog()` is the manifest the decider reads (`runfacts capabilities export
module:registry`), `registry.adapters()` what `runfacts worker dispatcher --tools
module:registry` serves: one source, so decider and dispatcher cannot disagree.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from contextlib import suppress
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from pydantic import TypeAdapter

from runfacts.processors.dispatcher.adapters import ToolAdapter
from runfacts.processors.policy.capabilities import (
    TOOL_MARK,
    ApprovalCondition,
    CapabilityCatalog,
    CapabilityManifest,
    compensation_problem,
)
from runfacts.processors.policy.retry import RetryPolicy
from runfacts.tools.errors import RegistryError
from runfacts.tools.spec import ToolSpec, build_spec

if TYPE_CHECKING:
    from runfacts.tools.adapter import ToolRuntime

F = TypeVar("F", bound=Callable[..., Any])
AdapterFactory = Callable[[Mapping[str, str]], ToolAdapter]
RetryClass = Literal["none", "standard", "patient"]
Rule = Iterable[tuple[str, str, Any] | Mapping[str, Any] | ApprovalCondition]

RETRY_CLASSES: dict[str, RetryPolicy] = {
    "none": RetryPolicy(max_attempts=1, base_backoff_ms=1, max_backoff_ms=1, deadline_ms=1),
    "standard": RetryPolicy(max_attempts=4, base_backoff_ms=200, max_backoff_ms=5_000, deadline_ms=30_000),
    "patient": RetryPolicy(max_attempts=8, base_backoff_ms=500, max_backoff_ms=30_000,
                           deadline_ms=300_000),
}


class ToolRegistry:
    """Tools by capability id; each becomes one manifest entry and one dispatcher adapter."""

    def __init__(self, name: str = "tools") -> None:
        self.name = name
        self._specs: dict[str, ToolSpec] = {}
        self._factories: dict[str, tuple[CapabilityManifest, AdapterFactory]] = {}

    # --- registration ------------------------------------------------------------------

    def tool(self, capability_id: str, *, risk: str = "low", needs_approval: bool = False,
             required_role: str = "support_agent", retry: RetryClass | RetryPolicy = "standard",
             reconcile_within_ms: int = 600_000, approval_ttl_ms: int = 900_000,
             self_approval: bool = False, timeout_s: float = 30.0,
             lookup: Callable[..., Any] | None = None, read_only: bool = False,
             idempotent: bool = False, approval_when: Rule = (), max_concurrency: int | None = None,
             rate_per_second: float | None = None,
             compensation: tuple[str, Mapping[str, str]] | None = None) -> Callable[[F], F]:
        """Register a sync or async function as the tool `capability_id` (see the module doc).

        `read_only=True` (changes nothing) or `idempotent=True` (a repeat with the call's
        idempotency key changes nothing more): a call whose outcome is lost is simply run again,
        and its exceptions are retryable failures. Otherwise every ending that does not prove
        the effect did not happen is result_unknown (docs/tools.md, "How a tool ends").
        `approval_when=[(field, op, value), ...]`: ask a person when any condition holds
        (docs/tools.md, "What the approver sees, and when to ask").
        `max_concurrency` / `rate_per_second`: each dispatcher runs at most that many of its calls
        at once / starts at most that many a second; the others wait, claimed (docs/dispatcher.md).
        `compensation=(capability_id, {argument: "args.<argument>" | "result.<field>"})`: the tool
        that undoes a completed call when its run is cancelled or fails (docs/tools.md, "Compensation")."""
        manifest = self._manifest(capability_id, risk=risk, needs_approval=needs_approval,
                                  required_role=required_role, retry=retry,
                                  reconcile_within_ms=reconcile_within_ms,
                                  approval_ttl_ms=approval_ttl_ms, self_approval=self_approval,
                                  read_only=read_only, idempotent=idempotent,
                                  has_lookup=lookup is not None, max_concurrency=max_concurrency,
                                  rate_per_second=rate_per_second,
                                  compensation=None if compensation is None else
                                  {"capability_id": compensation[0], "arguments": dict(compensation[1])})
        if timeout_s <= 0:
            raise RegistryError(capability_id, f"timeout_s={timeout_s}: expected > 0 seconds")

        def register(function: F) -> F:
            self._free(capability_id)
            spec = _with_arguments(build_spec(manifest, function, timeout_s), approval_when)
            self._specs[capability_id] = spec if lookup is None else _with_lookup(spec, lookup)
            with suppress(AttributeError, TypeError):  # `run.propose(function, ...)` takes it for its id
                setattr(function, TOOL_MARK, capability_id)
            return function
        return register

    def lookup(self, capability_id: str) -> Callable[[F], F]:
        """Register the reconciliation lookup of an already registered tool."""
        def register(function: F) -> F:
            spec = self._specs.get(capability_id)
            if spec is None:
                raise RegistryError(capability_id, "lookup registered before (or without) its tool: "
                                                   "decorate the tool first")
            if spec.lookup is not None:
                raise RegistryError(capability_id, "has a lookup already")
            self._specs[capability_id] = _with_lookup(spec, function)
            return function
        return register

    def adapter(self, manifest: CapabilityManifest, factory: AdapterFactory) -> None:
        """Register a ready-made `ToolAdapter`, built (from the serve options) only when served."""
        self._free(manifest.capability_id)
        self._factories[manifest.capability_id] = (manifest, factory)

    def _free(self, capability_id: str) -> None:
        if capability_id in self._specs or capability_id in self._factories:
            raise RegistryError(capability_id, f"registered twice in registry {self.name!r}: "
                                               "each capability id names exactly one tool")

    def _manifest(self, capability_id: str, *, retry: RetryClass | RetryPolicy,
                  reconcile_within_ms: int, **fields: Any) -> CapabilityManifest:
        policy = retry if isinstance(retry, RetryPolicy) else RETRY_CLASSES.get(retry)
        if policy is None:
            raise RegistryError(capability_id, f"retry={retry!r}: expected one of "
                                               f"{', '.join(RETRY_CLASSES)} or a RetryPolicy")
        try:
            return CapabilityManifest(capability_id=capability_id, retry=policy,
                                      reconciliation_deadline_ms=reconcile_within_ms, **fields)
        except ValueError as exc:
            raise RegistryError(capability_id, f"bad declaration: {exc}") from None

    # --- what it serves ----------------------------------------------------------------

    def result_types(self) -> dict[str, TypeAdapter[Any]]:
        """Each tool's declared return type (tools declaring none, or Any, are left out): what
        a client that learned this registry turns `call.result()` into."""
        return {cid: spec.result for cid, spec in sorted(self._specs.items()) if spec.result is not None}

    @property
    def capability_ids(self) -> tuple[str, ...]:
        return tuple(sorted({*self._specs, *self._factories}))

    def spec(self, capability_id: str) -> ToolSpec:
        """The decorated tool `capability_id` (a RegistryError naming the known ones)."""
        try:
            return self._specs[capability_id]
        except KeyError:
            raise RegistryError(capability_id, f"not a decorated tool of registry {self.name!r} "
                                               f"(known: {', '.join(self.capability_ids) or 'none'})") from None

    def catalog(self) -> CapabilityCatalog:
        """The capability manifest of every tool: what the decider reads."""
        manifests = {cid: spec.manifest for cid, spec in self._specs.items()}
        manifests.update({cid: m for cid, (m, _) in self._factories.items()})
        if not manifests:
            raise RegistryError(self.name, "the registry has no tools")
        for cid, manifest in manifests.items():
            why = compensation_problem(manifest, manifests)
            if why is not None:
                raise RegistryError(cid, f"bad compensation ({why[0]!r}): {why[1]}")
        return CapabilityCatalog(capabilities=dict(sorted(manifests.items())))

    def adapters(self, only: Iterable[str] | None = None, options: Mapping[str, str] | None = None,
                 runtime: ToolRuntime | None = None) -> dict[str, ToolAdapter]:
        """One adapter per tool (or per id in `only`); ready-made adapters are built now."""
        from runfacts.tools.adapter import RegisteredTool

        wanted = self.capability_ids if only is None else tuple(only)
        out: dict[str, ToolAdapter] = {}
        for cid in wanted:
            if cid in self._factories:
                out[cid] = self._factories[cid][1](options or {})
            else:
                out[cid] = RegisteredTool(self.spec(cid), runtime)
        return out


def _with_arguments(spec: ToolSpec, rule: Rule) -> ToolSpec:
    """The spec whose manifest carries the argument schema and the approval rule."""
    from dataclasses import replace

    conditions = [c if isinstance(c, ApprovalCondition | Mapping) else
                  {"field": c[0], "op": c[1], "value": tuple(c[2]) if isinstance(c[2], list | tuple | set) else c[2]}
                  for c in rule]
    data = {**spec.manifest.model_dump(), "argument_schema": spec.args_model.model_json_schema(),
            "approval_when": conditions}
    try:
        manifest = CapabilityManifest.model_validate(data)
    except ValueError as exc:
        raise RegistryError(spec.id, f"bad approval_when or compensation: {exc}") from None
    return replace(spec, manifest=manifest)


def _with_lookup(spec: ToolSpec, function: Callable[..., Any]) -> ToolSpec:
    from dataclasses import replace

    return replace(spec, lookup=function, manifest=spec.manifest.model_copy(update={"has_lookup": True}))

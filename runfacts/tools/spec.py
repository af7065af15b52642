"""One tool as the registry holds it: its manifest and its typed function (pure)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, get_type_hints

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError, create_model

from runfacts.processors.capabilities import CapabilityManifest
from runfacts.processors.retry import canonical_json
from runfacts.tools.errors import RegistryError


@dataclass(frozen=True)
class ToolContext:
    """What a tool knows about the call it executes (pass the key to your backend)."""

    tool_call_id: str
    capability_id: str
    idempotency_key: str  # stable across every attempt of the call: dedupe on it
    external_request_id: str  # this claim's id (`<toolCallId>-a<attempt>`): what lookup gets
    attempt: int
    lease_epoch: int  # grows with every claim; refuse requests with a smaller one


@dataclass(frozen=True)
class LookupContext:
    """What a lookup gets: the request to find (the `external_request_id` a tool saw)."""

    capability_id: str
    external_request_id: str


@dataclass(frozen=True)
class ToolSpec:
    """A registered tool: manifest, function, argument model, result type, lookup."""

    manifest: CapabilityManifest
    function: Callable[..., Any]
    args_model: type[BaseModel]
    whole_model: bool  # the function takes the model as one parameter (else its fields)
    ctx_name: str | None
    result: TypeAdapter[Any] | None
    is_async: bool
    timeout_s: float
    lookup: Callable[..., Any] | None = None

    @property
    def id(self) -> str:
        return self.manifest.capability_id

    def arguments(self, raw: dict[str, Any]) -> BaseModel:
        """The typed arguments; a ValueError naming the tool and each bad field."""
        try:
            return self.args_model.model_validate(raw)
        except ValidationError as exc:
            raise ValueError(f"tool {self.id}: arguments do not fit {self.args_model.__name__}: "
                             f"{field_errors(exc)}") from None

    def call_args(self, args: BaseModel, ctx: ToolContext) -> dict[str, Any]:
        """The keyword arguments the function is called with."""
        kwargs: dict[str, Any] = {}
        if self.whole_model:
            kwargs[next(iter(self._params()))] = args
        else:
            kwargs.update({name: getattr(args, name) for name in self.args_model.model_fields})
        if self.ctx_name is not None:
            kwargs[self.ctx_name] = ctx
        return kwargs

    def _params(self) -> list[str]:
        return [p for p in inspect.signature(self.function).parameters if p != self.ctx_name]

    def result_json(self, value: Any) -> str | None:
        """Canonical JSON of the function's return value (None stays None)."""
        if value is None:
            return None
        if self.result is None:
            dumped = value.model_dump(mode="json", by_alias=True) if isinstance(value, BaseModel) else value
        else:
            try:
                dumped = self.result.dump_python(self.result.validate_python(value), mode="json",
                                                 by_alias=True)
            except ValidationError as exc:
                raise ValueError(f"tool {self.id}: result does not fit its return type: "
                                 f"{field_errors(exc)}") from None
        return canonical_json(dumped).decode()


def field_errors(exc: ValidationError) -> str:
    """'amount_minor: Input should be greater than 0 (got -5); ...'."""
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"]) or "(value)"
        given = f" (got {error['input']!r})" if error["type"] != "missing" else ""
        parts.append(f"{where}: {error['msg']}{given}")
    return "; ".join(parts)


def build_spec(manifest: CapabilityManifest, function: Callable[..., Any], timeout_s: float) -> ToolSpec:
    """Read the function's signature: a ctx parameter, the argument model, the result type."""
    tool = manifest.capability_id
    hints = _hints(tool, function)
    params = list(inspect.signature(function).parameters.values())
    ctx_name = next((p.name for p in params if p.name == "ctx" or hints.get(p.name) is ToolContext), None)
    fields = [p for p in params if p.name != ctx_name]
    for p in fields:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise RegistryError(tool, f"parameter *{p.name}: declare each argument (or one model)")
        if p.name not in hints:
            raise RegistryError(tool, f"parameter {p.name!r} has no type annotation")
    whole = len(fields) == 1 and _is_model(hints[fields[0].name])
    if whole:
        model: type[BaseModel] = hints[fields[0].name]
    else:
        definitions: dict[str, Any] = {
            p.name: (hints[p.name], ... if p.default is p.empty else p.default) for p in fields}
        model = create_model(f"{_camel(tool)}Arguments", __config__=ConfigDict(extra="forbid", frozen=True),
                             **definitions)
    returns = hints.get("return", Any)
    result = None if returns in (None, type(None), Any) else TypeAdapter(returns)
    return ToolSpec(manifest, function, model, whole, ctx_name, result,
                    inspect.iscoroutinefunction(function), timeout_s)


def _hints(tool: str, function: Callable[..., Any]) -> dict[str, Any]:
    try:
        return get_type_hints(function, include_extras=True)
    except (NameError, TypeError) as exc:
        raise RegistryError(tool, f"cannot resolve the type annotations of "
                                  f"{getattr(function, '__qualname__', function)}: {exc}") from exc


def _is_model(hint: Any) -> bool:
    return isinstance(hint, type) and issubclass(hint, BaseModel)


def _camel(capability_id: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in capability_id.replace("-", ".").replace("_", ".").split("."))

"""Render the pydantic models (common.py, events.py, commands.py) from the current .avsc files.

The models are generated from the contract, so they can never be newer than it; the
contract tests also hold them to it field by field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from runfacts.schemas.catalog import Catalog, Kind, SchemaEntry
from runfacts.schemas.errors import ContractViolation

_PRIMITIVES = {"string": "str", "int": "int", "long": "int", "boolean": "bool",
               "double": "float", "float": "float", "bytes": "bytes"}
_MODULES = {"runfacts.common": "common", "runfacts.events": "events",
            "runfacts.commands": "commands"}
HEADER = '"""{doc}, generated from schemas/avro by `runfacts schemas generate`: do not edit."""\n'
_DOCS = {"common": "Contract types", "events": "Event models", "commands": "Command models"}


@dataclass
class _Module:
    """What one generated module holds."""

    blocks: list[str] = field(default_factory=list)
    imports: dict[str, set[str]] = field(default_factory=dict)

    def need(self, module: str, name: str) -> None:
        self.imports.setdefault(module, set()).add(name)


@dataclass
class _Context:
    """Named types seen so far and the modules being written."""

    modules: dict[str, _Module] = field(default_factory=lambda: {m: _Module() for m in _DOCS})
    defined: dict[str, Any] = field(default_factory=dict)
    current: str = "common"

    def use(self, fullname: str) -> str:
        namespace, short = fullname.rsplit(".", 1)
        module = _MODULES[namespace]
        if module != self.current:
            self.modules[self.current].need(f"runfacts.schemas.{module}", short)
        return short


def render_models(catalog: Catalog) -> dict[str, str]:
    """Module name -> source text, for every current type in the catalog."""
    ctx = _Context()
    currents = sorted(catalog.current.values(), key=lambda e: e.fullname)
    for kind in ("event", "command"):
        entries = [e for e in currents if e.kind == kind]
        _render_envelope(ctx, kind, entries)
        ctx.current = "events" if kind == "event" else "commands"
        for entry in entries:
            _render_top(ctx, entry)
        _render_union(ctx, kind, entries)
        ctx.current = "common"
    return {name: _module_text(name, module) for name, module in ctx.modules.items()}


def _render_envelope(ctx: _Context, kind: Kind, entries: list[SchemaEntry]) -> None:
    """EventEnvelope/EventBase (or Command...) from the envelope the current schemas share."""
    shapes = {e.fullname: _without(e.raw["fields"][:-1], ("doc", "default")) for e in entries}
    first = entries[0]
    for entry in entries:
        if shapes[entry.fullname] != shapes[first.fullname]:
            raise ContractViolation(entry.fullname, entry.version,
                                    f"envelope differs from {first.fullname}")
    title = kind.capitalize()
    ns = first.raw["namespace"]
    general = {f"{kind}Type": "str", "schemaVersion": "int"}
    lines = [f"class {title}Envelope(Record):",
             f'    """The {kind} envelope: every field but the payload."""', ""]
    for fld in first.raw["fields"][:-1]:
        if fld["name"] in general:
            lines.append(f"    {fld['name']}: {general[fld['name']]}")
        else:
            lines.append(_field_line(ctx, fld, ns))
    ctx.modules["common"].blocks.append("\n".join(lines))
    ctx.modules["common"].blocks.append(
        f'class {title}Base({title}Envelope):\n    """Base of every {kind} model."""\n\n'
        f"    payload: Record")
    ctx.modules["common"].need("runfacts.schemas.base", "Record")


def _without(node: Any, keys: tuple[str, ...]) -> Any:
    """A schema node with the given attributes dropped everywhere."""
    if isinstance(node, dict):
        return {k: _without(v, keys) for k, v in node.items() if k not in keys}
    if isinstance(node, list):
        return [_without(v, keys) for v in node]
    return node


def _render_top(ctx: _Context, entry: SchemaEntry) -> None:
    """One event/command class: narrowed type, version and payload."""
    payload = entry.raw["fields"][-1]
    payload_type = _py_type(ctx, payload["type"], entry.raw["namespace"])
    base = "EventBase" if entry.kind == "event" else "CommandBase"
    ctx.modules[ctx.current].need("runfacts.schemas.common", base)
    ctx.modules[ctx.current].need("typing", "Literal")
    type_field = "eventType" if entry.kind == "event" else "commandType"
    ctx.modules[ctx.current].blocks.append("\n".join([
        f"class {entry.name}({base}):",
        f'    """{entry.raw["doc"]}"""',
        "",
        f'    {type_field}: Literal["{entry.type_name}"] = "{entry.type_name}"',
        f"    schemaVersion: Literal[{entry.version}] = {entry.version}",
        f"    payload: {payload_type}",
    ]))


def _render_union(ctx: _Context, kind: Kind, entries: list[SchemaEntry]) -> None:
    module = ctx.modules[ctx.current]
    module.need("typing", "Annotated")
    module.need("pydantic", "Field")
    title = kind.capitalize()
    type_field = f"{kind}Type"
    names = [e.name for e in entries]
    members = "\n".join([f"    {names[0]}", *(f"    | {n}" for n in names[1:])])
    classes = "\n".join(f'    "{e.type_name}": {e.name},' for e in entries)
    module.blocks.append(
        f"{title} = Annotated[\n{members},\n    Field(discriminator=\"{type_field}\"),\n]\n"
        f'"""Any current {kind}, discriminated on {type_field}."""')
    module.blocks.append(
        f"{kind.upper()}_CLASSES: dict[str, type[{title}Base]] = {{\n{classes}\n}}")


def _py_type(ctx: _Context, node: Any, namespace: str) -> str:
    """The Python annotation of an Avro type, registering named types on the way."""
    if isinstance(node, str):
        if node in _PRIMITIVES:
            return _PRIMITIVES[node]
        return ctx.use(node if "." in node else f"{namespace}.{node}")
    if isinstance(node, list):
        branches = [_py_type(ctx, b, namespace) for b in node if b != "null"]
        return " | ".join(branches) + (" | None" if "null" in node else "")
    if node.get("logicalType") == "timestamp-millis":
        ctx.modules[ctx.current].need("runfacts.schemas.base", "Millis")
        return "Millis"
    if node["type"] == "array":
        return f"tuple[{_py_type(ctx, node['items'], namespace)}, ...]"
    if node["type"] in ("record", "enum"):
        return _define(ctx, node, node.get("namespace", namespace))
    return _PRIMITIVES[node["type"]]


def _define(ctx: _Context, node: dict[str, Any], namespace: str) -> str:
    """Emit a named record or enum once (in its namespace's module) and reference it."""
    fullname = f"{namespace}.{node['name']}"
    if fullname in ctx.defined:
        if _without(ctx.defined[fullname], ("doc",)) != _without(node, ("doc",)):
            raise ContractViolation(fullname, None, "two current schemas define it differently")
        return ctx.use(fullname)
    ctx.defined[fullname] = node
    outer, ctx.current = ctx.current, _MODULES[namespace]
    if node["type"] == "enum":
        ctx.modules[ctx.current].need("typing", "Literal")
        symbols = "".join(f'    "{s}",\n' for s in node["symbols"])
        block = f'{node["name"]} = Literal[\n{symbols}]\n"""{node["doc"]}"""'
    else:
        lines = [_field_line(ctx, fld, namespace) for fld in node["fields"]]
        ctx.modules[ctx.current].need("runfacts.schemas.base", "Record")
        head = f'class {node["name"]}(Record):\n    """{node.get("doc", node["name"])}"""\n'
        block = head + ("\n" + "\n".join(lines) if lines else "")
    ctx.modules[ctx.current].blocks.append(block)
    ctx.current = outer
    return ctx.use(fullname)


def _field_line(ctx: _Context, fld: dict[str, Any], namespace: str) -> str:
    annotation = _py_type(ctx, fld["type"], namespace)
    if "pattern" in fld:
        module = ctx.modules[ctx.current]
        module.need("typing", "Annotated")
        module.need("pydantic", "StringConstraints")
        annotation = f'Annotated[{annotation}, StringConstraints(pattern=r"{fld["pattern"]}")]'
    if "default" not in fld:
        return f"    {fld['name']}: {annotation}"
    default = fld["default"]
    literal = "()" if default == [] else json.dumps(default) if isinstance(default, str) \
        else repr(default)
    return f"    {fld['name']}: {annotation} = {literal}"


def _module_text(name: str, module: _Module) -> str:
    stdlib = sorted(m for m in module.imports if "." not in m and m != "pydantic")
    others = sorted(m for m in module.imports if m not in stdlib)
    lines = ["from __future__ import annotations", ""]
    for group in (stdlib, others):
        lines += [_import_line(m, sorted(module.imports[m])) for m in group]
        if group:
            lines.append("")
    body = "\n\n\n".join(module.blocks)
    return HEADER.format(doc=_DOCS[name]) + "\n" + "\n".join(lines) + "\n\n" + body + "\n"


def _import_line(module: str, names: list[str]) -> str:
    line = f"from {module} import {', '.join(names)}"
    if len(line) <= 100:
        return line
    return f"from {module} import (\n" + "".join(f"    {n},\n" for n in names) + ")"

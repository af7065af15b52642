"""The argument display: what an approver sees of a call's arguments, and what binds it (pure).

- `render(arguments, schema, keep)`: the `ArgDisplay` of real arguments, fields in the order of
  the tool's argument schema (a JSON schema, `CapabilityManifest.arguments()`), each with its
  canonical-JSON value, the schema's `unit` and `pii`. Personal fields (`"pii": true`, or every
  field when there is no schema) carry their value in `personalValue`, which the privacy
  envelope seals and role trimming masks. Over `MAX_FIELDS` fields or `VALUE_CHARS` characters
  a value, the display is cut visibly (`omittedFields`, `omittedChars`), never a field in `keep`
  (the fields the approval rule reads).
- `display_digest(display)`: sha256 over every field's name, unit, pii flag, omission and
  clear value (a personal value is bound by argsHash, not by the digest: the decider holds no
  key to read a sealed value). The decider records it, the approver's token signs it, the
  dispatcher renders the stored arguments again and refuses to run them when it differs.
- `normalize(display, schema)`: the display with the schema's labels (decider side).
- `problems(display, schema)`: what in the display breaks the schema ("amount_cents: 250000 is
  over the maximum 100000"), over the values the decider can read (clear, uncut).
- `masked(display)`, `display_lines(display)`: what a UI shows (personal values masked for a
  viewer that must not see them; cuts and omissions said in words).
- `asks_approval(manifest rule, display, schema)`: does the approval rule hold (cautious: a value
  the rule reads that the decider cannot read asks).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from runfacts.processors.policy.retry import canonical_json
from runfacts.schemas.common import ArgDisplay, ArgField

MAX_FIELDS = 32
"""Fields a display shows; further ones are counted in `omittedFields`."""
VALUE_CHARS = 240
"""Characters of a value's JSON a display shows; the rest is counted in `omittedChars`."""
NO_VALUE = object()


def render(arguments: Mapping[str, Any], schema: Mapping[str, Any] | None,
           keep: Iterable[str] = ()) -> ArgDisplay:
    """The display of `arguments` under the tool's argument `schema` (None: every field personal)."""
    props = _properties(schema)
    kept = set(keep)
    names = [n for n in props if n in arguments] + sorted(n for n in arguments if n not in props)
    shown = [n for n in names if n in kept] + [n for n in names if n not in kept]
    shown = shown[:max(MAX_FIELDS, len(kept & set(names)))]
    fields = [_field(name, arguments[name], props.get(name), schema is None, name in kept)
              for name in names if name in shown]
    return ArgDisplay(fields=tuple(fields), omittedFields=len(names) - len(fields))


def _field(name: str, value: Any, prop: Mapping[str, Any] | None, unknown: bool, whole: bool) -> ArgField:
    text = canonical_json(value).decode()
    cut = 0 if whole or len(text) <= VALUE_CHARS else len(text) - VALUE_CHARS
    text = text[:len(text) - cut]
    personal = unknown or prop is None or bool(prop.get("pii"))
    unit = prop.get("unit") if prop is not None and isinstance(prop.get("unit"), str) else None
    return ArgField(name=name, value=None if personal else text, personalValue=text if personal else None,
                    unit=unit, pii=personal, omittedChars=cut)


def display_digest(display: ArgDisplay) -> str:
    """sha256 (hex) of what the display binds: names, labels, omissions, clear values."""
    body = {"fields": [{"name": f.name, "value": f.value, "unit": f.unit, "pii": f.pii,
                        "omittedChars": f.omittedChars} for f in display.fields],
            "omittedFields": display.omittedFields}
    return hashlib.sha256(canonical_json(body)).hexdigest()


def personal_fields(display: ArgDisplay) -> frozenset[str]:
    """The fields a display shows as personal (the dispatcher renders them so again)."""
    return frozenset(f.name for f in display.fields if f.pii)


def rerender(arguments: Mapping[str, Any], shown: ArgDisplay) -> ArgDisplay:
    """`arguments` rendered as `shown` was (its fields, order, cuts, labels): equal digests mean
    every clear value shown is the argument's; a field it names that the arguments lack, another
    value, or another count of arguments not shown makes them differ."""
    fields = []
    for f in shown.fields:
        if f.name in arguments:
            text = canonical_json(arguments[f.name]).decode()
            cut = 0 if f.omittedChars == 0 else max(len(text) - VALUE_CHARS, 0)
            text = text[:len(text) - cut]
            fields.append(f.model_copy(update={"value": None if f.pii else text,
                                               "personalValue": text if f.pii else None, "omittedChars": cut}))
    return ArgDisplay(fields=tuple(fields), omittedFields=len(arguments) - len(fields))


def normalize(display: ArgDisplay, schema: Mapping[str, Any] | None) -> ArgDisplay:
    """The display with the schema's labels: its unit; a field the schema calls personal moves to
    personalValue, a readable value of a field it does not moves to value (a sealed one stays)."""
    if schema is None:
        return display
    props = _properties(schema)
    fields = []
    for f in display.fields:
        prop = props.get(f.name) or {}
        unit = prop.get("unit") if isinstance(prop.get("unit"), str) else None
        text = f.value if f.value is not None else f.personalValue
        personal = bool(prop.get("pii")) or (f.value is None and not _readable(text, f.omittedChars))
        fields.append(ArgField(name=f.name, value=None if personal else text,
                               personalValue=text if personal else None, unit=unit, pii=personal,
                               omittedChars=f.omittedChars))
    return ArgDisplay(fields=tuple(fields), omittedFields=display.omittedFields)


def _readable(text: str | None, cut: int) -> bool:
    if text is None:
        return False
    if cut:
        return text[:1] in '"[{-0123456789tfn'  # a JSON prefix, not a sealed token
    return _parse(text) is not NO_VALUE


def _parse(text: str | None) -> Any:
    if text is None:
        return NO_VALUE
    try:
        return json.loads(text)
    except ValueError:
        return NO_VALUE  # sealed by the privacy envelope, or not JSON


def values(display: ArgDisplay, clear_only: bool = False) -> dict[str, Any]:
    """The values the decider can read: uncut, JSON (a sealed personal value is not)."""
    out = {}
    for f in display.fields:
        text = f.value if f.value is not None or clear_only else f.personalValue
        value = _parse(text) if f.omittedChars == 0 else NO_VALUE
        if value is not NO_VALUE:
            out[f.name] = value
    return out


def problems(display: ArgDisplay, schema: Mapping[str, Any] | None) -> list[str]:
    """What in the display breaks the argument schema, each naming the field and the bound."""
    if schema is None:
        return []
    props, defs = _properties(schema), schema.get("$defs", {})
    names = [f.name for f in display.fields]
    out = [f"{n}: not an argument of this tool (expected {', '.join(props) or 'none'})"
           for n in names if n not in props and schema.get("additionalProperties") is False]
    if display.omittedFields == 0:
        out += [f"{n}: required, missing" for n in schema.get("required", ()) if n not in names]
    readable = values(display)
    out += [f"{f.name}: not personal in the tool's schema, yet its value is sealed or not JSON: render the "
            "display with the tool's schema (Runfacts.connect(capabilities=...))"
            for f in display.fields if f.name in props and f.pii and not props[f.name].get("pii")]
    for name in names:
        if name in props and name in readable:
            problem = check(readable[name], props[name], defs, name)
            if problem:
                out.append(problem)
    return out


def check(value: Any, node: Mapping[str, Any], defs: Mapping[str, Any], path: str) -> str | None:
    """The first way `value` breaks JSON-schema `node` (a subset: type, bounds, lengths, pattern,
    enum/const, items, properties; other keywords are left to the tool's own validation)."""
    if "$ref" in node:
        node = {**defs.get(str(node["$ref"]).rsplit("/", 1)[-1], {}), **{k: v for k, v in node.items()
                                                                        if k != "$ref"}}
    for key in ("anyOf", "oneOf"):
        if key in node:
            found = [check(value, branch, defs, path) for branch in node[key]]
            if all(found):
                return found[0]
    if "enum" in node and value not in node["enum"]:
        return f"{path}: {value!r} is not one of {node['enum']}"
    if "const" in node and value != node["const"]:
        return f"{path}: {value!r} is not {node['const']!r}"
    kind = node.get("type")
    if kind is not None and not _is(value, kind):
        return f"{path}: {json.dumps(value)} is not of type {kind}"
    return _bounds(value, node, path) or _children(value, node, defs, path)


_TYPES: dict[str, tuple[type, ...]] = {"integer": (int,), "number": (int, float), "string": (str,),
                                       "boolean": (bool,), "array": (list,), "object": (dict,),
                                       "null": (type(None),)}


def _is(value: Any, kind: Any) -> bool:
    kinds = kind if isinstance(kind, list) else [kind]
    for k in kinds:
        if isinstance(value, bool) and k not in ("boolean",):
            continue
        if isinstance(value, _TYPES.get(k, (object,))) or (k == "integer" and isinstance(value, float)
                                                            and value.is_integer()):
            return True
    return False


_BOUNDS = (("minimum", lambda v, b: v >= b, "under the minimum"), ("maximum", lambda v, b: v <= b, "over the maximum"),
           ("exclusiveMinimum", lambda v, b: v > b, "not over the exclusive minimum"),
           ("exclusiveMaximum", lambda v, b: v < b, "not under the exclusive maximum"))


def _bounds(value: Any, node: Mapping[str, Any], path: str) -> str | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        for key, ok, words in _BOUNDS:
            if key in node and not ok(value, node[key]):
                return f"{path}: {json.dumps(value)} is {words} {node[key]} ({key})"
    if isinstance(value, str):
        if "minLength" in node and len(value) < node["minLength"]:
            return f"{path}: {len(value)} characters, under minLength {node['minLength']}"
        if "maxLength" in node and len(value) > node["maxLength"]:
            return f"{path}: {len(value)} characters, over maxLength {node['maxLength']}"
        if "pattern" in node and not re.search(node["pattern"], value):
            return f"{path}: {value!r} does not match the pattern {node['pattern']}"
    if isinstance(value, list):
        if "minItems" in node and len(value) < node["minItems"]:
            return f"{path}: {len(value)} items, under minItems {node['minItems']}"
        if "maxItems" in node and len(value) > node["maxItems"]:
            return f"{path}: {len(value)} items, over maxItems {node['maxItems']}"
    return None


def _children(value: Any, node: Mapping[str, Any], defs: Mapping[str, Any], path: str) -> str | None:
    if isinstance(value, list) and isinstance(node.get("items"), dict):
        for i, item in enumerate(value):
            problem = check(item, node["items"], defs, f"{path}[{i}]")
            if problem:
                return problem
    if isinstance(value, dict) and "properties" in node:
        props = node["properties"]
        for name in node.get("required", ()):
            if name not in value:
                return f"{path}.{name}: required, missing"
        for name, item in value.items():
            if name in props:
                problem = check(item, props[name], defs, f"{path}.{name}")
                if problem:
                    return problem
            elif node.get("additionalProperties") is False:
                return f"{path}.{name}: not a field of {node.get('title', path)}"
    return None


def asks_approval(rule: Sequence[Any], display: ArgDisplay, schema: Mapping[str, Any] | None) -> str | None:
    """Why the rule asks for approval (the first condition that holds), or None. A condition whose
    field the decider cannot read in the clear (absent without a default, cut, personal) holds."""
    readable = values(display, clear_only=True)
    props = _properties(schema)
    for condition in rule:
        name = condition.field
        value = readable.get(name, NO_VALUE)
        if value is NO_VALUE and name not in {f.name for f in display.fields} and "default" in props.get(name, {}):
            value = props[name]["default"]
        if value is NO_VALUE:
            return f"{name} is not shown in the clear, so the rule {condition.describe()} cannot be ruled out"
        if holds(condition.op, value, condition.value):
            return f"{name}={json.dumps(value)}: {condition.describe()}"
    return None


def holds(op: str, value: Any, bound: Any) -> bool:
    """One condition; a comparison across types holds (cautious: it asks)."""
    if op in ("==", "!="):
        return (value == bound) == (op == "==")
    if op in ("in", "not_in"):
        return (value in bound) == (op == "in")
    numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (value, bound))
    if not numeric and not (isinstance(value, str) and isinstance(bound, str)):
        return True
    return {">": value > bound, ">=": value >= bound, "<": value < bound, "<=": value <= bound}[op]


def _properties(schema: Mapping[str, Any] | None) -> dict[str, Any]:
    return dict(schema.get("properties", {})) if schema is not None else {}


PERSONAL_MASK = "[personal]"


def masked(display: ArgDisplay | None) -> ArgDisplay | None:
    """The display with personal values masked (for a viewer that must not see personal data)."""
    if display is None:
        return None
    return display.model_copy(update={"fields": tuple(
        f.model_copy(update={"personalValue": PERSONAL_MASK}) if f.pii and f.personalValue is not None else f
        for f in display.fields)})


def display_lines(display: ArgDisplay | None) -> list[str]:
    """`amount_cents = 250000 cents`, one line per argument; cuts and omissions said visibly."""
    if display is None:
        return ["(no argument display: proposed by an older client; the approval binds the argsHash only)"]
    lines = [_line(f) for f in display.fields]
    if display.omittedFields:
        lines.append(f"... {display.omittedFields} more argument(s) not shown (display cap)")
    return lines


def _line(f: ArgField) -> str:
    value = f.value if f.value is not None else (f.personalValue or "")
    text = f"{f.name} = {value}"
    if f.omittedChars:
        text += f"... [+{f.omittedChars} characters cut]"
    if f.unit:
        text += f" {f.unit}"
    return text + (" (personal)" if f.pii else "")

"""Personal-data fields, read from the schema (`"pii": true`), so projections redact by schema.

`pii_paths("run.created")` -> ("payload.goalSummary", "payload.userId",
"payload.actor.subjectId"); a path through an array ends its segment with `[]`.
`redact(model)` returns a copy with every such field masked (null values stay null).
"""

from __future__ import annotations

from functools import cache
from typing import Any

from pydantic import BaseModel

from runfacts.schemas.catalog import TYPE_FIELD, SchemaEntry, default_catalog

MASK = "[redacted]"


def pii_paths(schema: str | type[BaseModel] | BaseModel) -> tuple[str, ...]:
    """Dotted paths of personal-data fields in a type's current schema."""
    return _paths(_entry(schema).fullname)


def redact(model: BaseModel, mask: str = MASK) -> Any:
    """A copy of an event or command with its personal-data fields masked."""
    values = model.model_dump()
    for path in pii_paths(model):
        _mask(values, path.split("."), mask)
    return type(model).model_validate(values)


def _entry(schema: str | type[BaseModel] | BaseModel) -> SchemaEntry:
    catalog = default_catalog()
    if isinstance(schema, str):
        entry = catalog.by_type.get(schema) or catalog.current.get(schema)
        if entry is None:
            raise KeyError(f"no schema named {schema!r}")
        return entry
    cls = schema if isinstance(schema, type) else type(schema)
    for kind in TYPE_FIELD.values():
        field = cls.model_fields.get(kind)
        if field is not None and isinstance(field.default, str):
            return catalog.by_type[field.default]
    raise KeyError(f"{cls.__name__} is not an event or command model")


@cache
def _paths(fullname: str) -> tuple[str, ...]:
    entry = default_catalog().current[fullname]
    return tuple(_walk(entry.raw, "", entry.raw["namespace"], {}))


def _walk(node: Any, prefix: str, namespace: str, named: dict[str, Any]) -> list[str]:
    if isinstance(node, str):
        return _walk(named[node], prefix, namespace, named) if node in named else []
    if isinstance(node, list):
        return [p for branch in node for p in _walk(branch, prefix, namespace, named)]
    if node.get("type") == "array":
        return _walk(node["items"], prefix + "[]", namespace, named)
    if node.get("type") != "record":
        return []
    namespace = node.get("namespace", namespace)
    named[f"{namespace}.{node['name']}"] = node
    found: list[str] = []
    for field in node["fields"]:
        path = f"{prefix}.{field['name']}" if prefix else field["name"]
        if field.get("pii"):
            found.append(path)
        else:
            found += _walk(field["type"], path, namespace, named)
    return found


def _mask(values: Any, steps: list[str], mask: str) -> None:
    if values is None:
        return
    head, rest = steps[0], steps[1:]
    if head.endswith("[]"):
        for item in values[head[:-2]] or ():
            _mask(item, rest, mask)
    elif rest:
        _mask(values[head], rest, mask)
    else:
        values[head] = _masked(values[head], mask)


def _masked(value: Any, mask: str) -> Any:
    if value is None:
        return None
    if isinstance(value, tuple | list):
        return [mask for _ in value]
    return mask

"""Deterministic example values for any shipped schema version (tests, golden files, benchmarks).

`sample(entry, seed)` walks the writer schema and fills every field: strings become
lower-case `<field>_<seed>`, numbers derive from the seed, optional fields are set, arrays
hold two items, enums cycle through their symbols. The type and version fields match the
entry, so the result encodes under it and decodes to a valid current model.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from runfacts.schemas.catalog import TYPE_FIELD, SchemaEntry

BASE_TIME = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def sample(entry: SchemaEntry, seed: int = 1) -> dict[str, Any]:
    """A full, valid value of `entry`'s record."""
    values: dict[str, Any] = _value(entry.raw, entry.raw.get("namespace", ""), seed, "", {})
    values[TYPE_FIELD[entry.kind]] = entry.type_name
    values["schemaVersion"] = entry.version
    return values


def _value(node: Any, namespace: str, seed: int, name: str, named: dict[str, Any]) -> Any:
    if isinstance(node, str):
        if node in _PRIMITIVE_KINDS:
            return _primitive(node, seed, name)
        fullname = node if "." in node else f"{namespace}.{node}"
        return _value(named[fullname], namespace, seed, name, named)
    if isinstance(node, list):
        return _value(next(b for b in node if b != "null"), namespace, seed, name, named)
    if node.get("logicalType") == "timestamp-millis":
        return BASE_TIME + timedelta(milliseconds=seed * 1001)
    kind = node["type"]
    if kind in ("record", "enum"):
        namespace = node.get("namespace", namespace)
        named[f"{namespace}.{node['name']}"] = node
    if kind == "record":
        return {f["name"]: _value(f["type"], namespace, seed + i, f["name"], named)
                for i, f in enumerate(node["fields"])}
    if kind == "enum":
        return node["symbols"][seed % len(node["symbols"])]
    if kind == "array":
        return [_value(node["items"], namespace, seed + i, name, named) for i in range(2)]
    return _primitive(kind, seed, name)


_PRIMITIVE_KINDS = ("string", "int", "long", "boolean", "double", "float", "bytes")


def _primitive(kind: str, seed: int, name: str) -> Any:
    if kind == "string":
        return f"{name.lower() or 'value'}_{seed}"
    if kind in ("int", "long"):
        return seed * 7 + len(name)
    if kind == "boolean":
        return seed % 2 == 0
    if kind in ("double", "float"):
        return seed / 4
    return f"{name}-{seed}".encode()

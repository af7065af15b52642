"""Write the .avsc contract from `spec`, and the lock of shipped digests.

A shipped file is never rewritten: generating a version that exists with other content
raises `ContractViolation` (bump the version instead).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from runfacts.schemas.catalog import LOCK_FILE, load_catalog
from runfacts.schemas.errors import ContractViolation
from runfacts.schemas.spec.fields import NAMESPACES, Named, TypeSpec, all_types, command_envelope, event_envelope, f


def build_schema(spec: TypeSpec) -> dict[str, Any]:
    """The full self-contained Avro record of one (type, version)."""
    envelope = (event_envelope if spec.kind == "event" else command_envelope)(
        spec.type_name, spec.version)
    payload = {"type": "record", "name": f"{spec.name}Payload", "doc": f"Payload of {spec.name}.",
               "fields": list(spec.fields)}
    raw = {"type": "record", "name": spec.name, "namespace": NAMESPACES[spec.kind],
           "doc": spec.doc, "fields": [*envelope, f("payload", payload)]}
    inlined: dict[str, Any] = _inline(raw, set())
    return inlined


def _inline(node: Any, seen: set[str]) -> Any:
    """Replace each Named by its definition at first use and by its full name after."""
    if isinstance(node, Named):
        if node.fullname in seen:
            return node.fullname
        seen.add(node.fullname)
        return _inline(node.definition, seen)
    if isinstance(node, dict):
        return {key: _inline(value, seen) for key, value in node.items()}
    if isinstance(node, list):
        return [_inline(item, seen) for item in node]
    return node


def render(schema: dict[str, Any]) -> str:
    """The file text of a schema (stable formatting)."""
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def schema_path(root: Path, spec: TypeSpec) -> Path:
    """Where one (type, version) lives."""
    return root / f"{spec.kind}s" / f"{spec.name}.v{spec.version}.avsc"


def write_schemas(root: Path, specs: tuple[TypeSpec, ...] | None = None) -> list[Path]:
    """Write each spec's version if not shipped yet; return the new files."""
    written: list[Path] = []
    for spec in all_types() if specs is None else specs:
        path = schema_path(root, spec)
        text = render(build_schema(spec))
        if path.exists():
            if path.read_text(encoding="utf-8") != text:
                raise ContractViolation(f"{NAMESPACES[spec.kind]}.{spec.name}", spec.version,
                                        f"{path.name} is shipped and frozen; bump the version")
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def update_lock(root: Path) -> dict[str, dict[str, str]]:
    """Add new files' digests to the lock; an existing entry is never changed."""
    catalog = load_catalog(root)
    lock = {name: dict(versions) for name, versions in catalog.lock.items()}
    for entry in catalog.entries:
        lock.setdefault(entry.fullname, {}).setdefault(str(entry.version), entry.digest)
    ordered = {name: dict(sorted(v.items(), key=lambda kv: int(kv[0])))
               for name, v in sorted(lock.items())}
    (root / LOCK_FILE).write_text(json.dumps(ordered, indent=2) + "\n", encoding="utf-8")
    return ordered

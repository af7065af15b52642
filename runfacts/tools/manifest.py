"""The registry's capability manifest as the TOML `worker decider --capabilities` reads (pure)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from runfacts.processors.policy.capabilities import CapabilityCatalog, parse_capabilities


def manifest_toml(catalog: CapabilityCatalog, source: str = "") -> str:
    """TOML text that `parse_capabilities` reads back to exactly `catalog`."""
    lines = [f"# Capability manifest generated from {source or 'a tool registry'} "
             "(runfacts capabilities export): do not edit, regenerate.", "# Times in milliseconds.", ""]
    for manifest in catalog.capabilities.values():
        data = manifest.model_dump(by_alias=True, mode="json")
        retry = data.pop("retry")
        lines.append("[[capability]]")
        lines += [f"{key} = {_value(value)}" for key, value in data.items() if value not in (None, [])]
        lines.append("[capability.retry]")
        lines += [f"{key} = {_value(value)}" for key, value in retry.items()]
        lines.append("")
    text = "\n".join(lines)
    if parse_capabilities(text, "generated manifest") != catalog:
        raise AssertionError("the generated manifest does not read back to the registry's catalog")
    return text


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_value(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {_value(v)}" for k, v in value.items()) + " }"
    return json.dumps(value)  # a TOML basic string is a JSON string


def written_manifest(tools: str, directory: Path) -> Path:
    """The registry `tools`' manifest written (content-addressed) under `directory`, for a
    decider started with `--tools` instead of `--capabilities`."""
    from runfacts.tools.loader import load_registry

    text = manifest_toml(load_registry(tools).catalog(), tools)
    path = directory / f"capabilities-{hashlib.sha256(text.encode()).hexdigest()[:16]}.toml"
    directory.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    return path

"""The registry's capability manifest as the TOML `worker decider --capabilities` reads (pure)."""

from __future__ import annotations

import json
from typing import Any

from runfacts.processors.capabilities import CapabilityCatalog, parse_capabilities


def manifest_toml(catalog: CapabilityCatalog, source: str = "") -> str:
    """TOML text that `parse_capabilities` reads back to exactly `catalog`."""
    lines = [f"# Capability manifest generated from {source or 'a tool registry'} "
             "(runfacts capabilities export): do not edit, regenerate.", "# Times in milliseconds.", ""]
    for manifest in catalog.capabilities.values():
        data = manifest.model_dump(by_alias=True, mode="json")
        retry = data.pop("retry")
        lines.append("[[capability]]")
        lines += [f"{key} = {_value(value)}" for key, value in data.items()]
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
    if isinstance(value, int):
        return str(value)
    return json.dumps(value)  # a TOML basic string is a JSON string

"""Find a registry by `module:attribute` (or `path/to/file.py:attribute`), as uvicorn finds apps."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
from pathlib import Path

from runfacts.schemas.errors import ConfigError
from runfacts.tools.registry import ToolRegistry

DEFAULT_TOOLS = "runfacts.tools.refund:registry"
# `--tools <scheme>:<argument>`: a registry a source function builds from the argument, named
# like any registry (module:function) so this room does not import the rooms above it
SOURCES = {"mcp": "runfacts.mcp.downstream:registry_from_manifest"}


def load_registry(spec: str, setting: str = "--tools") -> ToolRegistry:
    """The `ToolRegistry` named by `spec`; the attribute may also be a function returning one.
    `mcp:<manifest.toml>` is the governed tools of an MCP server (docs/mcp.md)."""
    module_name, sep, attribute = spec.partition(":")
    if module_name in SOURCES and sep:
        source_module, _, function = SOURCES[module_name].partition(":")
        built = getattr(_module(source_module, spec, setting), function)(attribute)
        if not isinstance(built, ToolRegistry):
            raise ConfigError(setting, spec, f"the {module_name} source built a {type(built).__name__}")
        return built
    if not sep or not module_name or not attribute:
        raise ConfigError(setting, spec, "expected module:attribute, e.g. examples.billing_tools:registry")
    module = _module(module_name, spec, setting)
    try:
        found = getattr(module, attribute)
    except AttributeError:
        raise ConfigError(setting, spec, f"module {module_name} has no attribute {attribute!r}") from None
    if inspect.isfunction(found):
        found = found()
    if not isinstance(found, ToolRegistry):
        raise ConfigError(setting, spec, f"is a {type(found).__name__}, not a ToolRegistry")
    return found


def load_attribute(spec: str, setting: str, example: str) -> object:
    """The object `module:attribute` (or `path/to/file.py:attribute`) names, imported from the
    working directory; `example` shows the expected form in the error."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ConfigError(setting, spec, f"expected module:attribute, e.g. {example}")
    module = _module(module_name, spec, setting)
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise ConfigError(setting, spec, f"module {module_name} has no attribute {attribute!r}") from None


def _module(name: str, spec: str, setting: str) -> object:
    if name.endswith(".py"):
        path = Path(name)
        module_spec = importlib.util.spec_from_file_location(path.stem, path)
        if module_spec is None or module_spec.loader is None or not path.is_file():
            raise ConfigError(setting, spec, f"no such file {path}")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[path.stem] = module
        module_spec.loader.exec_module(module)
        return module
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # `examples.billing_tools` from the project's root
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        raise ConfigError(setting, spec, f"cannot import {name}: {exc}") from exc

"""The operator's manifest of a governed MCP server (pure: TOML text in, a frozen model out).

    # ledger.mcp.toml
    name = "ledger"                       # capability ids are "ledger.<tool>"
    command = ["python", "ledger_server.py"]   # stdio; or url = "http://127.0.0.1:8000/mcp"
    serve = "listed"                      # "listed": only the [tool.*] below; "all": every tool it lists

    [tool.credit]
    risk = "high"                         # default "high"
    needs_approval = true                 # default true
    lookup = "find_credit"                # reconciliation: the tool answering "did request X happen?"

    [tool.balance]
    read_only = true                      # defaults risk "low", no approval, a lost answer retried

Relative paths in `command` and `cwd` are the operator's: they are kept as written (the
command runs in `cwd`, default the manifest's folder).
"""

from __future__ import annotations

import re
import tomllib
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from runfacts.schemas.errors import ConfigError

NAME = r"^[A-Za-z0-9_\-]+$"


class ToolRule(BaseModel):
    """How runfacts governs one MCP tool (every field has the safe default)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    read_only: bool = False
    risk: Literal["low", "medium", "high"] | None = None  # default: low when read_only, else high
    needs_approval: bool | None = None  # default: not read_only
    required_role: str = "support_agent"
    retry: Literal["none", "standard", "patient"] = "standard"
    reconcile_within_ms: int = Field(default=600_000, ge=1)
    approval_ttl_ms: int = Field(default=900_000, ge=1)
    self_approval: bool = False
    timeout_s: float = Field(default=30.0, gt=0)
    lookup: str | None = None  # the MCP tool reconciliation calls
    lookup_argument: str = "external_request_id"  # its argument holding the request id

    @property
    def effective_risk(self) -> str:
        return self.risk or ("low" if self.read_only else "high")

    @property
    def effective_needs_approval(self) -> bool:
        return (not self.read_only) if self.needs_approval is None else self.needs_approval


class McpManifest(BaseModel):
    """A downstream MCP server and the rules of its tools."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=NAME)
    command: tuple[str, ...] | None = None
    url: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    headers: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    serve: Literal["listed", "all"] = "listed"
    connect_timeout_s: float = Field(default=30.0, gt=0)
    default: ToolRule = ToolRule()
    tool: dict[str, ToolRule] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_transport(self) -> McpManifest:
        if (self.command is None) == (self.url is None):
            raise ValueError("give exactly one of command = [...] (stdio) or url = \"http...\" (streamable HTTP)")
        if self.command is not None and not self.command:
            raise ValueError("command is empty: give the program and its arguments")
        if self.serve == "listed" and not self.tool:
            raise ValueError("serve = \"listed\" but no [tool.<name>] table: list the tools to govern "
                             "or set serve = \"all\"")
        return self

    def rule(self, tool: str) -> ToolRule:
        """The rule of `tool`: its own table, else the [default] table."""
        return self.tool.get(tool, self.default)

    def capability_id(self, tool: str) -> str:
        """`<name>.<tool>`, with characters a capability id cannot hold replaced by `_`."""
        return f"{self.name}.{re.sub(r'[^A-Za-z0-9._-]', '_', tool)}"


def parse_manifest(text: str, source: str = "<mcp manifest>") -> McpManifest:
    """The manifest in `text`; a ConfigError naming the file, the field and the fix."""
    try:
        data: dict[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("mcp manifest", source, f"is not TOML: {exc}") from None
    try:
        return McpManifest.model_validate(data)
    except ValidationError as exc:
        parts = [f"{'.'.join(str(p) for p in e['loc']) or '(file)'}: {e['msg']}" for e in exc.errors()]
        raise ConfigError("mcp manifest", source, "; ".join(parts)) from None

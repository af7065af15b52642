"""`runfacts approvals list|show`: pending approvals with the arguments they would allow.

Read from the compacted run-state topic. Each approval is shown with its argument display
(the tool's schema names, values, units; personal values masked as `[personal]`), what it
asks in plain words, its risk, role, expiry, argsHash and the display digest the signed
decision binds (`runfacts approve APPROVAL_ID` decides it).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import typer

from runfacts.cli.ops import JSON_OUT, _all_states
from runfacts.client.approvals import Approval, approvals_of, display_lines
from runfacts.ops.control import ControlError

app = typer.Typer(help="Pending approvals and the arguments they would allow.", no_args_is_help=True)


def _as_dict(a: Approval) -> dict[str, Any]:
    return {"runId": a.run_id, "approvalId": a.approval_id, "toolCallId": a.tool_call_id, "asks": a.asks,
            "risk": a.risk, "requiredRole": a.required_role, "expiresAt": a.expires_at.isoformat(),
            "argsHash": a.args_hash, "displayDigest": a.display_digest, "arguments": display_lines(a.display),
            "display": None if a.display is None else a.display.model_dump(mode="json")}


def _pending(role: str | None, tenant: str | None) -> list[Approval]:
    return approvals_of(_all_states().values(), role, tenant, datetime.now(UTC))


def _print(a: Approval) -> None:
    typer.echo(f"{a.approval_id}  run {a.run_id}  {a.asks}  role {a.required_role}  "
               f"expires {a.expires_at.isoformat(timespec='seconds')}")
    for line in display_lines(a.display):
        typer.echo(f"    {line}")


@app.command("list")
def list_approvals(role: str = typer.Option(None, "--role", help="Only approvals this role may decide."),
                   tenant: str = typer.Option(None, "--tenant", help="Only this tenant's runs."),
                   as_json: bool = JSON_OUT) -> None:
    """Open, unexpired approvals, oldest first, each with its arguments."""
    found = _pending(role, tenant)
    if as_json:
        typer.echo(json.dumps([_as_dict(a) for a in found], indent=2))
        return
    if not found:
        typer.echo("no pending approvals")
    for a in found:
        _print(a)


@app.command("show")
def show(approval_id: str = typer.Argument(..., help="The approval's id (approval-<toolCallId>)."),
         as_json: bool = JSON_OUT) -> None:
    """One pending approval: what it asks, the arguments, the hashes its decision binds."""
    found = [a for a in _pending(None, None) if a.approval_id == approval_id]
    if not found:
        raise ControlError(f"no pending approval {approval_id} (decided, expired, or not proposed yet)")
    if as_json:
        typer.echo(json.dumps([_as_dict(a) for a in found], indent=2))
        return
    for a in found:
        _print(a)
        typer.echo(f"    argsHash {a.args_hash}\n    displayDigest {a.display_digest or '(none)'}")

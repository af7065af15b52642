"""`runfacts tools`: operator controls of tools for the whole fleet (docs/dispatcher.md "Paused capabilities").

- `tools pause CAPABILITY --reason TEXT`: `tool.pause` through the run decider (operator role; the
  decider records `tool.paused` and writes it to `<prefix>.tools.control`). Every dispatcher then
  holds the capability's calls: none is claimed, no retry of a claimed one is tried; a try already
  running completes and is reported. Each held run says why (`Waiting: CAP paused by WHO: REASON`).
- `tools resume CAPABILITY [--reason TEXT]`: `tool.resume`; held calls are dispatched (within about a
  second), each once.
- `tools list`: the paused capabilities, by whom, why and since when (exit 0 either way).
Exit codes: 0 accepted, 3 the decider refused (e.g. `forbidden_role`: the detail names the role),
1 configuration or broker error.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import typer
from rich.console import Console

from runfacts.cli.ops import _identity, _issue, _send, _setup
from runfacts.tools.control import ToolControlBoard, pause_command, resume_command, since

app = typer.Typer(no_args_is_help=True, help="Pause and resume tools (capabilities) for the whole fleet.")
TIMEOUT = typer.Option(30.0, "--timeout", help="Seconds to wait for the run decider's answer.")


@app.command("pause")
def pause(capability: str = typer.Argument(..., help="The capability id, e.g. payments.refund."),
          reason: str = typer.Option(..., "--reason", help="Why: shown on every held run (no personal data)."),
          timeout: float = TIMEOUT) -> None:
    """Pause a capability on every dispatcher: its calls wait (visibly) until it is resumed."""
    issue = _issue(_identity())
    _send(pause_command(capability, reason, issue.actor, issue.command_id, issue.issued_at), timeout)
    Console().print(f"{capability} paused: no dispatcher claims its calls until `runfacts tools resume "
                    f"{capability}`; a try already running completes", highlight=False)


@app.command("resume")
def resume(capability: str = typer.Argument(..., help="The capability id."),
           reason: str = typer.Option("", "--reason", help="Why (kept on the log)."),
           timeout: float = TIMEOUT) -> None:
    """Resume a paused capability: its held calls are dispatched, each once."""
    issue = _issue(_identity())
    _send(resume_command(capability, reason, issue.actor, issue.command_id, issue.issued_at), timeout)
    Console().print(f"{capability} resumed: held calls are dispatched", highlight=False)


@app.command("list")
def list_paused(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """The capabilities paused now (from the control topic)."""
    kafka, names, _settings = _setup()
    board = ToolControlBoard(kafka, names.tool_control, component="cli", follow=False).board()
    if as_json:
        typer.echo(json.dumps({cap: {"pauseId": p.pause_id, "pausedBy": p.paused_by, "reason": p.reason,
                                     "pausedAt": p.paused_at.isoformat()} for cap, p in sorted(board.items())}))
        return
    if not board:
        Console().print("no capability is paused", highlight=False)
    now = datetime.now(UTC)
    for cap, p in sorted(board.items()):
        Console().print(f"{cap}  paused by {p.paused_by} for {since(p, now)}: {p.reason}", highlight=False)

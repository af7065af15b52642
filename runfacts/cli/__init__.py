"""The `runfacts` command: one entry point, one command tree.

Each area keeps its commands in its own module (a `typer.Typer` named `app`) and is
registered here, so `runfacts --help` lists everything in one place. Expected errors
(bad settings, bad input, a broker that is down) print as one readable line; `--debug`
shows the traceback.

Shells: every module, one per command group, and render (rich tables and the one progress
bar). Only this room, runfacts.demo and runfacts.dev import typer and rich.
"""

from __future__ import annotations

import functools
import sys

import typer

from runfacts.schemas.errors import ConfigError, InfrastructureError, RunfactsError

HELP = "Durable, replayable, auditable facts for AI-agent runs, on Kafka."
LEAN = ("gateway",)
"""Command groups `main` runs without importing the whole tree: `runfacts gateway serve` is a
long-running server whose resident memory counts (the gateway's 10,000-stream bar: the other
groups' modules, the dashboard's, the demo's, rich's, are ~12 MB it never uses)."""

__all__ = ["app", "main"]

_debug = {"on": False}


def _root(debug: bool = typer.Option(False, "--debug", help="Show tracebacks on errors.")) -> None:
    """Durable, replayable, auditable facts for AI-agent runs, on Kafka."""
    _debug["on"] = debug


def _new_root() -> typer.Typer:
    root = typer.Typer(name="runfacts", help=HELP, no_args_is_help=True, pretty_exceptions_enable=False)
    root.callback()(_root)
    return root


@functools.cache
def _tree() -> typer.Typer:
    """The whole command tree (every group imported and registered)."""
    from runfacts.cli import demo
    from runfacts.cli import events as events_cli
    from runfacts.cli import projections as projections_cli
    from runfacts.cli.approvals import app as approvals_app
    from runfacts.cli.dev import dev_app, provider_app
    from runfacts.cli.dlq import app as dlq_app
    from runfacts.cli.erase import app as erase_app
    from runfacts.cli.gateway import app as gateway_app
    from runfacts.cli.mcp import app as mcp_app
    from runfacts.cli.ops import app as ops_app
    from runfacts.cli.platform import (
        capabilities_app,
        dispatcher_app,
        engine_app,
        outbox_app,
        schemas_app,
        security_app,
        topics_app,
        worker_app,
    )
    from runfacts.cli.toolctl import app as tools_app

    app = _new_root()
    app.command("demo")(demo.demo)
    app.command("events")(events_cli.events)
    app.add_typer(dev_app, name="dev")
    app.add_typer(topics_app, name="topics")
    app.add_typer(schemas_app, name="schemas")
    app.add_typer(outbox_app, name="outbox")
    app.add_typer(provider_app, name="provider")
    app.add_typer(engine_app, name="engine")
    app.add_typer(security_app, name="security")
    app.add_typer(dispatcher_app, name="dispatcher")
    app.add_typer(worker_app, name="worker")
    app.add_typer(capabilities_app, name="capabilities")
    app.add_typer(ops_app)  # inspect, approve, reject, stop, cancel, retry, runs, users, dashboard
    app.add_typer(approvals_app, name="approvals")
    app.add_typer(projections_cli.audit_app, name="audit")
    app.command("replay")(projections_cli.replay_command)
    app.add_typer(projections_cli.trajectories_app, name="trajectories")
    app.add_typer(dlq_app, name="dlq")
    app.add_typer(erase_app, name="erase")
    app.add_typer(gateway_app, name="gateway")
    app.add_typer(mcp_app, name="mcp")
    app.add_typer(tools_app, name="tools")
    return app


def _lean(group: str) -> typer.Typer:
    """The root with one group only (`LEAN`)."""
    from runfacts.cli.gateway import app as gateway_app

    app = _new_root()
    app.add_typer(gateway_app, name=group)
    return app


def __getattr__(name: str) -> typer.Typer:  # `from runfacts.cli import app`: the whole tree, built on first use
    if name == "app":
        return _tree()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    """Console-script entry point: run the app, turning expected errors into one line.

    In non-standalone mode click returns a command's `typer.Exit(code)` as the app's return
    value instead of raising it; that code is the process's exit status (every command
    returns None, so anything else means 0). An error that escapes a command exits as the
    workers do: 2 for a bad setting or input (`ConfigError`), 3 when a service cannot be
    reached (`InfrastructureError`), 1 for anything else.
    """
    argv = sys.argv[1:]
    app = _lean(argv[0]) if argv[:1] and argv[0] in LEAN else _tree()
    try:
        code = app(standalone_mode=False)
    except RunfactsError as exc:
        if _debug["on"]:
            raise
        from rich.console import Console

        Console(stderr=True).print(f"[bold red]error:[/] {exc}", highlight=False)
        sys.exit(2 if isinstance(exc, ConfigError) else 3 if isinstance(exc, InfrastructureError) else 1)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        sys.exit(130)
    except Exception as exc:  # click usage errors arrive here in non-standalone mode
        # typer bundles its own click (typer._click), so match click's exception by shape
        if callable(getattr(exc, "show", None)) and isinstance(getattr(exc, "exit_code", None), int):
            exc.show()  # type: ignore[attr-defined]
            sys.exit(exc.exit_code)  # type: ignore[attr-defined]
        raise
    sys.exit(code if isinstance(code, int) else 0)


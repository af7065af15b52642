"""`runfacts dispatcher ...`: run the tool dispatcher worker; store a call's arguments."""

from __future__ import annotations

import json
import logging
import sys
from typing import Annotated

import typer

from runfacts.processors.worker import run

app = typer.Typer(help="The tool dispatcher: executes authorized tool calls, reconciles unknown outcomes.",
                  no_args_is_help=True)

Store = Annotated[str, typer.Option(help="SQLite file of the argument store (the harness's database)")]


@app.command("run")
def run_command(
    args_store: Store,
    prefix: Annotated[str, typer.Option(help="topic prefix")] = "runfacts",
    provider_url: Annotated[str, typer.Option(help="payment provider (default $RUNFACTS_PAYMENT_URL)")] = "",
    capabilities: Annotated[str, typer.Option(help="capability manifest TOML (default: packaged)")] = "",
    instance: Annotated[str, typer.Option(help="actor subjectId (default $RUNFACTS_INSTANCE_ID)")] = "",
) -> None:
    """Run the dispatcher until SIGTERM (engine settings from RUNFACTS_* variables)."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    params = [f"prefix={prefix}", f"args_store={args_store}", f"provider_url={provider_url}",
              f"capabilities={capabilities}", f"instance={instance}"]
    raise typer.Exit(run("runfacts.processors.dispatcher_app:dispatcher_app", params))


@app.command("put-args")
def put_args(
    args_store: Store,
    arguments: Annotated[str, typer.Argument(help="the call's arguments as a JSON object")],
    ref: Annotated[str, typer.Option(help="argsRef (default: content-addressed)")] = "",
) -> None:
    """Store a call's arguments; prints the argsRef and argsHash its proposal must carry."""
    from runfacts.connectors.args_store import ArgsStore

    try:
        value = json.loads(arguments)
    except ValueError as exc:
        raise typer.BadParameter(f"not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise typer.BadParameter("expected a JSON object")
    store = ArgsStore.open(args_store)
    try:
        stored = store.put(value, ref or None)
    finally:
        store.close()
    typer.echo(json.dumps({"argsRef": stored.ref, "argsHash": stored.hash}))

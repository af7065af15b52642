"""`runfacts dispatcher put-args`: store a call's arguments (run the worker: `runfacts worker dispatcher`)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

app = typer.Typer(help="The tool dispatcher's argument store (the worker: `runfacts worker dispatcher`).",
                  no_args_is_help=True)

Store = Annotated[str, typer.Option(
    help="Argument store: a SQLite file or a postgresql:// URL (the harness's database)")]


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

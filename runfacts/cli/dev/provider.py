"""`runfacts provider …`: run the simulated payment provider."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from runfacts.dev import require_clone
from runfacts.schemas.errors import ConfigError

app = typer.Typer(help="The simulated payment provider (refunds, faults, ledger).",
                  no_args_is_help=True)


@app.command("serve")
def serve_command(
    port: Annotated[int, typer.Option(help="TCP port (0 picks a free one).")] = 8480,
    host: Annotated[str, typer.Option(help="Interface; the test-control API (/_faults, /_ledger, "
                                           "/_settle) has no key, so expose it only on a private "
                                           "network (e.g. compose's).")] = "127.0.0.1",
    ledger: Annotated[Path | None, typer.Option(help="JSON-lines ledger file.")] = None,
    api_key_file: Annotated[
        Path | None, typer.Option(help="API key file (default: $RUNFACTS_PAYMENT_API_KEY).")
    ] = None,
    max_amount_minor: Annotated[int, typer.Option(help="Larger refunds are declined.")] = 1_000_000,
) -> None:
    """Serve the provider until SIGTERM/SIGINT; prints its URL first."""
    require_clone("runfacts.dev.provider", "runfacts provider serve")  # the simulator is not in the wheel
    from runfacts.dev.provider.server import SimSettings, api_key_from, serve

    try:
        key = api_key_from(dict(os.environ), api_key_file)
    except ConfigError as exc:
        raise typer.BadParameter(str(exc)) from exc
    serve(SimSettings(api_key=key, host=host, port=port, ledger_path=ledger,
                      max_amount_minor=max_amount_minor))

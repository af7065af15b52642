"""`runfacts engine ...`: run an application worker from the command line."""

from __future__ import annotations

import logging
import sys
from typing import Annotated

import typer

from runfacts.processors.engine.worker import run

app = typer.Typer(help="The processor engine: run applications on Kafka.", no_args_is_help=True)

AppOption = Annotated[str, typer.Option("--app", help="module:factory returning an Application")]
ParamOption = Annotated[list[str] | None, typer.Option("--param", help="key=value for the factory")]


@app.command("run")
def run_command(app_spec: AppOption, param: ParamOption = None) -> None:
    """Run an application until SIGTERM (settings from RUNFACTS_* environment variables)."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    raise typer.Exit(run(app_spec, param or []))

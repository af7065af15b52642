"""The `runfacts` command: one entry point, one command tree.

Each area keeps its commands in its own module (a `typer.Typer` named `app`) and is
registered here, so `runfacts --help` lists everything in one place.
"""

from __future__ import annotations

import typer

from runfacts.schemas.cli import app as schemas_app

app = typer.Typer(
    name="runfacts",
    help="Durable, replayable, auditable facts for AI-agent runs, on Kafka.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(schemas_app, name="schemas")


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()

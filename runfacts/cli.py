"""The `runfacts` command: one entry point, one command tree.

Each area keeps its commands in its own module (a `typer.Typer` named `app`) and is
registered here, so `runfacts --help` lists everything in one place.
"""

from __future__ import annotations

import typer

app = typer.Typer(
    name="runfacts",
    help="Durable, replayable, auditable facts for AI-agent runs, on Kafka.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

from runfacts.connectors.relay_cli import app as outbox_app  # noqa: E402

app.add_typer(outbox_app, name="outbox")


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()

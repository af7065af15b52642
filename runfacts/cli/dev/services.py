"""`runfacts dev kafka|postgres …`: start, stop and probe the local broker and database."""

from __future__ import annotations

from collections.abc import Callable

import typer
from rich.console import Console

from runfacts.cli.dev.crash import crash
from runfacts.cli.dev.up import up
from runfacts.dev.services import LocalKafka, LocalPostgres, ServiceError

console = Console()
dev_app = typer.Typer(help="Local development: `dev up` (the whole stack), a real Kafka broker, PostgreSQL.",
                      no_args_is_help=True)
kafka_app = typer.Typer(help="The single-node KRaft broker on 127.0.0.1 (jars from Maven Central).",
                        no_args_is_help=True)
postgres_app = typer.Typer(help="A local PostgreSQL server for the outbox.", no_args_is_help=True)
dev_app.add_typer(kafka_app, name="kafka")
dev_app.add_typer(postgres_app, name="postgres")
dev_app.command("crash")(crash)
dev_app.command("up")(up)


def _service(action: Callable[[], str | None]) -> str | None:
    """Run a start/stop script; its failure (e.g. the port is held, naming the process) is the
    script's own words on stderr and exit 1, not a traceback."""
    try:
        return action()
    except ServiceError as exc:
        Console(stderr=True).print(f"[bold red]error:[/] {exc}", highlight=False)
        raise typer.Exit(1) from None


@kafka_app.command("start")
def kafka_start() -> None:
    """Fetch the jars if needed and start the broker (no-op when running, reused when a runfacts
    broker already answers on KAFKA_PORT; names the process holding the port otherwise)."""
    console.print(f"kafka running at [bold]{_service(LocalKafka().start)}[/]")


@kafka_app.command("stop")
def kafka_stop() -> None:
    """Stop the broker started by `runfacts dev kafka start`."""
    _service(LocalKafka().stop)
    console.print("kafka stopped")


@kafka_app.command("status")
def kafka_status() -> None:
    """Say whether the local broker accepts connections."""
    kafka = LocalKafka()
    state = "[green]up[/]" if kafka.is_up() else "[red]down[/]"
    console.print(f"kafka {kafka.bootstrap}: {state}")
    raise typer.Exit(0 if kafka.is_up() else 3)


@postgres_app.command("start")
def postgres_start() -> None:
    """Start the local PostgreSQL server (installs Debian's package when missing)."""
    console.print(f"postgres running at [bold]{_service(LocalPostgres().start)}[/]")

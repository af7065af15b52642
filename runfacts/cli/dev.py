"""`runfacts dev …` (local broker and database) and `runfacts topics …` (provisioning)."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.table import Table

from runfacts.cli.crash import crash
from runfacts.dev.services import LocalKafka, LocalPostgres
from runfacts.settings import KafkaSettings
from runfacts.topics import TopicNames, apply_topics, runfacts_topics

console = Console()
dev_app = typer.Typer(help="Local development services: a real Kafka broker and PostgreSQL.",
                      no_args_is_help=True)
kafka_app = typer.Typer(help="The single-node KRaft broker on 127.0.0.1 (jars from Maven Central).",
                        no_args_is_help=True)
postgres_app = typer.Typer(help="A local PostgreSQL server for the outbox.", no_args_is_help=True)
dev_app.add_typer(kafka_app, name="kafka")
dev_app.add_typer(postgres_app, name="postgres")
dev_app.command("crash")(crash)
topics_app = typer.Typer(help="Provision runfacts topics from the declarative spec.",
                         no_args_is_help=True)


@kafka_app.command("start")
def kafka_start() -> None:
    """Fetch the jars if needed and start the broker (no-op when running)."""
    console.print(f"kafka running at [bold]{LocalKafka().start()}[/]")


@kafka_app.command("stop")
def kafka_stop() -> None:
    """Stop the broker started by `runfacts dev kafka start`."""
    LocalKafka().stop()
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
    console.print(f"postgres running at [bold]{LocalPostgres().start()}[/]")


@topics_app.command("apply")
def topics_apply(
    prefix: str = typer.Option(None, help="Topic name prefix (default: RUNFACTS_KAFKA_TOPIC_PREFIX or runfacts)."),
    partitions: int = typer.Option(None, help="Partitions for runId-keyed topics (default 6)."),
) -> None:
    """Create missing topics and align configs; refuse partition/cleanup mismatches."""
    settings = KafkaSettings()
    names = TopicNames(prefix or settings.topic_prefix)
    specs = runfacts_topics(names, partitions or settings.partitions)
    report = apply_topics(settings, specs)
    table = Table("topic", "partitions", "cleanup", "retention.ms", "action")
    for spec in specs:
        action = ("created" if spec.name in report.created
                  else "altered " + ",".join(report.altered[spec.name]) if spec.name in report.altered
                  else "unchanged")
        table.add_row(spec.name, str(spec.partitions), spec.cleanup_policy, str(spec.retention_ms), action)
    console.print(table)


@topics_app.command("list")
def topics_list(prefix: str = typer.Option("runfacts", help="Topic name prefix.")) -> None:
    """Print the topic spec (name, partitions, policy, purpose) without touching Kafka."""
    table = Table("topic", "partitions", "cleanup", "retention.ms", "purpose")
    for spec in runfacts_topics(TopicNames(prefix), KafkaSettings().partitions):
        table.add_row(spec.name, str(spec.partitions), spec.cleanup_policy, str(spec.retention_ms), spec.purpose)
    console.print(table)

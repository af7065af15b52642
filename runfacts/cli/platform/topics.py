"""`runfacts topics apply|list`: provision runfacts topics from the declarative spec."""

from __future__ import annotations

from typing import Any, cast

import typer
from rich.console import Console
from rich.table import Column, Table

from runfacts.settings import KafkaSettings
from runfacts.topics import TopicNames, TopicSpec, apply_topics, runfacts_topics

console = Console()
topics_app = typer.Typer(help="Provision runfacts topics from the declarative spec.",
                         no_args_is_help=True)


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
def topics_list(
    prefix: str = typer.Option(None, help="Topic name prefix (default: RUNFACTS_KAFKA_TOPIC_PREFIX or runfacts)."),
) -> None:
    """Print the topic spec (name, partitions, policy, purpose) without touching Kafka.

    On a terminal a table; otherwise (a pipe, a file) one tab-separated line per topic. Topic
    names are printed whole either way (a cut name cannot be copied).
    """
    settings = KafkaSettings()
    print_specs(console, runfacts_topics(TopicNames(prefix or settings.topic_prefix), settings.partitions))


def print_specs(out: Console, specs: list[TopicSpec]) -> None:
    """The topic spec as a table on a terminal (only the purpose wraps), as lines elsewhere."""
    rows = [(s.name, str(s.partitions), s.cleanup_policy, str(s.retention_ms), s.purpose) for s in specs]
    header = ("topic", "partitions", "cleanup", "retention.ms", "purpose")
    if not out.is_terminal:
        for row in (header, *rows):
            out.file.write("\t".join(row) + "\n")  # rich would expand the tabs
        return
    fixed = [max(len(r[i]) for r in (header, *rows)) for i in range(4)]
    table = Table(*(Column(h, no_wrap=True, min_width=w) for h, w in zip(header, fixed, strict=False)),
                  Column("purpose", overflow="fold", min_width=20))
    for row in rows:
        table.add_row(*row)
    width = max(out.width, sum(fixed) + 20 + 3 * 5 + 1)  # wider than the terminal rather than cut
    colors = cast(Any, out.color_system)  # the same system: rich types it as a Literal
    wide = Console(file=out.file, width=width, force_terminal=True, color_system=colors)
    wide.print(table)

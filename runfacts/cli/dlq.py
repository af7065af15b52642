"""`runfacts dlq list|redrive`: what was dead-lettered and why; re-submit it after a fix.

The commands only: reading letters, the redrive plan and the transactional redrive are
runfacts.ops.dlq (what a dead letter is, how a redrive is recorded).
"""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from runfacts.logread import read_to_end
from runfacts.ops.dlq import DeadLetter, matches, parse_filters, read_letters, redrive, redrive_plan
from runfacts.schemas.errors import ConfigError
from runfacts.settings import KafkaSettings
from runfacts.topics import TopicNames, group_prefix

app = typer.Typer(help="Dead letters: list them with their reasons, re-submit them after a fix.",
                  no_args_is_help=True)
console = Console()


def _topic(prefix: str, topic: str) -> str:
    return topic or TopicNames(prefix or KafkaSettings().topic_prefix).dlq


def _letters(prefix: str, topic: str) -> list[DeadLetter]:
    """The letters, read as the CLI principal (group `<prefix>-cli-…`, the prefix its ACLs grant)."""
    kafka = KafkaSettings()
    group = group_prefix(prefix or kafka.topic_prefix, "cli")
    return read_letters(read_to_end(kafka.bootstrap_servers, [topic], config=kafka.client_config(),
                                 group_prefix=group)[topic])


def _table(letters: list[DeadLetter]) -> Table:
    table = Table("dead letter", "from", "schema", "app", "reason", "redriven to")
    for x in letters:
        r = x.reasons
        version = f" v{r['schemaVersion']}" if r["schemaVersion"] else ""
        table.add_row(x.position, f"{r['topic']}[{r['partition']}]@{r['offset']}", r["schema"] + version, r["app"],
                      r["error"], x.redriven_to or "-")
    return table


Prefix = Annotated[str, typer.Option(help="Topic prefix (default: RUNFACTS_KAFKA_TOPIC_PREFIX or runfacts).")]
Topic = Annotated[str, typer.Option(help="The dead-letter topic (default: <prefix>.dlq).")]
Filters = Annotated[list[str] | None, typer.Option("--filter", help="name=value over the reasons (repeatable).")]


@app.command("list")
def list_command(prefix: Prefix = "", topic: Topic = "", filter_: Filters = None,
                 as_json: Annotated[bool, typer.Option("--json", help="One JSON object per letter.")] = False) -> None:
    """Show dead letters with their reasons (and whether they were redriven)."""
    filters = parse_filters(filter_ or [])
    letters = [x for x in _letters(prefix, _topic(prefix, topic)) if matches(x, filters)]
    if as_json:
        for x in letters:
            typer.echo(json.dumps({"position": x.position, **x.reasons, "redrivenTo": x.redriven_to}))
        return
    console.print(_table(letters))
    console.print(f"{len(letters)} dead letter(s), {sum(1 for x in letters if x.redriven_to)} redriven")


@app.command("redrive")
def redrive_command(prefix: Prefix = "", topic: Topic = "", filter_: Filters = None,
                    all_: Annotated[bool, typer.Option("--all", help="Redrive every letter (no filter).")] = False,
                    again: Annotated[bool, typer.Option(help="Also letters redriven before.")] = False,
                    dry_run: Annotated[bool, typer.Option(help="Only show what would be redriven.")] = False) -> None:
    """Re-submit dead letters to their original topic after a fix, and record that it happened."""
    filters = parse_filters(filter_ or [])
    if not filters and not all_:
        raise ConfigError("--filter", None, "give at least one filter, or --all to redrive every dead letter")
    dlq = _topic(prefix, topic)
    plan = redrive_plan(_letters(prefix, dlq), filters, again)
    console.print(_table(plan))
    if dry_run:
        console.print(f"dry run: {len(plan)} dead letter(s) would be redriven")
        return
    done = redrive(KafkaSettings(), dlq, plan)
    console.print(f"redrove {done} dead letter(s); markers recorded in {dlq}")

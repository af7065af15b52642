"""`runfacts events RUN_ID`: a run's facts from the events log, as a readable timeline.

Reads the run's partition of the events topic once (read_committed) through
`runfacts.client.follower.read_run` and prints one row per fact (`runfacts.client.timeline`:
personal fields redacted). `--reveal` (a CLI user with the auditor role, privacy keys
configured) shows them through `runfacts.privacy.reveal` instead: plain, or `[erased]`.
Exit codes: 0 shown, 1 no such run, not an auditor, or a broker/config error.
"""

from __future__ import annotations

import json

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from runfacts.client.follower import FollowerSettings, read_run
from runfacts.client.timeline import Row, timeline
from runfacts.privacy.envelope import KeyView
from runfacts.privacy.keys import load_privacy_keys
from runfacts.privacy.store import KeyStore
from runfacts.schemas.errors import RunfactsError
from runfacts.security.identity import cli_identity, load_users
from runfacts.settings import KafkaSettings
from runfacts.topics import TopicNames


class NoFacts(RunfactsError):
    """The events log holds no fact of the run."""


def _auditor_keys(kafka: KafkaSettings, names: TopicNames) -> KeyView:
    identity = cli_identity(load_users())
    if "auditor" not in identity.roles:
        raise NotAnAuditor(f"user {identity.subject} ({', '.join(identity.roles)}): --reveal needs the auditor role")
    return KeyStore(kafka, names.keys, load_privacy_keys()).view()


class NotAnAuditor(RunfactsError):
    """Personal fields are shown to auditors only."""


def render(run_id: str, rows: list[Row]) -> Table:
    table = Table(title=f"facts of {run_id} ({len(rows)})", title_justify="left", expand=False)
    for name in ("#", "at (UTC)", "fact", "call / approval", "by", "detail"):
        table.add_column(name, overflow="fold")
    for i, r in enumerate(rows, start=1):
        style = "red" if r.event_type in ("command.rejected", "tool.call.failed", "run.failed") else None
        table.add_row(str(i), r.at.strftime("%H:%M:%S.%f")[:-3], r.event_type, r.subject, r.producer,
                      escape(r.detail), style=style)
    return table


def events(
    run_id: str = typer.Argument(..., help="The run's id."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON lines instead of a table."),
    timeout: float = typer.Option(60.0, "--timeout", help="Seconds to read the run's partition for."),
    reveal: bool = typer.Option(False, "--reveal", help="Show personal fields (auditor role; RUNFACTS_PII_KEYS)."),
) -> None:
    """Show a run's facts (the events log) as a timeline, personal fields redacted."""
    kafka = KafkaSettings()
    names = TopicNames(kafka.topic_prefix)
    keys = _auditor_keys(kafka, names) if reveal else None
    entries = read_run(kafka, FollowerSettings(names.events, names.prefix, "cli", backfill_timeout_s=timeout), run_id)
    if not entries:
        raise NoFacts(f"run {run_id}: no facts in {names.events} (check the id and RUNFACTS_KAFKA_TOPIC_PREFIX)")
    rows = timeline(entries, keys)
    if as_json:
        for r in rows:
            typer.echo(json.dumps({"offset": r.offset, "at": r.at.isoformat(), "eventType": r.event_type,
                                   "subject": r.subject, "producer": r.producer, "detail": r.detail}))
        return
    Console().print(render(run_id, rows))

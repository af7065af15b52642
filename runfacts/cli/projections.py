"""`runfacts audit verify`, `runfacts replay`, `runfacts trajectories export`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from runfacts.cli.render import progress_bar
from runfacts.logread import log_range
from runfacts.projections.audit.summary import AuditConfig
from runfacts.projections.audit.verify import VerifySettings, findings_lines, verify
from runfacts.projections.projector.app import PII_KEY_ENV
from runfacts.projections.projector.replay import ReplaySettings, projectors, replay
from runfacts.projections.trajectory.export import ExportSettings, Format, export
from runfacts.schemas.errors import ConfigError
from runfacts.settings import KafkaSettings
from runfacts.topics import TopicNames

console = Console(stderr=True)
audit_app = typer.Typer(help="The audit trail: verify its hash chains against the events log.",
                        no_args_is_help=True)
trajectories_app = typer.Typer(help="Eval trajectories: export for evaluation pipelines.",
                               no_args_is_help=True)

EventsTopic = Annotated[str | None, typer.Option(
    "--events-topic", help="Events topic (default: <prefix>.run.events).")]
PiiKey = Annotated[str, typer.Option(
    "--pii-key", envvar="RUNFACTS_AUDIT_PII_KEY",
    help="HMAC key for personal-field digests (must match the one the audit was built with).")]


@audit_app.command("verify")
def audit_verify(
    run: Annotated[str | None, typer.Option("--run", help="Only this run id.")] = None,
    events_topic: EventsTopic = None,
    audit_topic: Annotated[str | None, typer.Option(help="Audit topic (default: <prefix>.audit).")]
    = None,
    pii_key: PiiKey = "",
) -> None:
    """Recompute every audit chain from the events log; report each run's first broken link.

    Exit 0 when every chain holds, 1 when a link is broken, 2 when the records hold keyed
    digests and no audit key was given.
    """
    settings = VerifySettings(run, events_topic, audit_topic, AuditConfig(pii_key.encode()))
    report = verify(KafkaSettings(), settings)
    if report.missing_key:  # every link would mismatch: not a verdict about tampering
        console.print(f"[bold red]error:[/] {next(findings_lines(report))}", highlight=False)
        raise typer.Exit(2)
    for line in findings_lines(report):
        typer.echo(line)
    raise typer.Exit(0 if report.ok else 1)


def replay_command(
    projection: Annotated[str, typer.Option(help="audit | trajectory | user-view | memory")],
    into: Annotated[str | None, typer.Option(
        help="Fresh topic name, or a directory (any value with '/'); "
             "default: <projection topic>.replay-<end offset sum>.")] = None,
    from_beginning: Annotated[bool, typer.Option("--from-beginning",
                                                 help="Start at each partition's first offset (default).")] = False,
    from_offset: Annotated[int | None, typer.Option(help="Start at this offset in every partition.")]
    = None,
    events_topic: EventsTopic = None,
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress bar.")] = False,
    pii_key: PiiKey = "",
) -> None:
    """Rebuild a projection from the events log into a fresh topic or a directory.

    The audit is rebuilt with the live projector's settings: personal values are HMAC digests
    under $RUNFACTS_AUDIT_PII_KEY (or --pii-key), so the replay equals the live audit."""
    if from_beginning and from_offset is not None:
        raise ConfigError("--from-offset", from_offset, "conflicts with --from-beginning")
    if projection not in projectors():
        raise ConfigError("--projection", projection, f"choose one of {sorted(projectors())}")
    kafka = KafkaSettings()
    topic = events_topic or TopicNames(kafka.topic_prefix).events
    log = log_range(kafka, topic, from_offset)
    target = into or _default_target(kafka, projection, sum(log.end.values()))
    settings = ReplaySettings(projection, target, topic, from_offset, audit=AuditConfig(pii_key.encode()))
    if projection == "audit" and not pii_key:
        console.print(f"note: {PII_KEY_ENV} is not set: the replay's personal values are plain SHA-256 digests "
                      "(it equals only an audit projected without a key)", highlight=False)
    with progress_bar(console, f"replay {projection}", log.total, transient=False, quiet=quiet) as update:
        done = [0]

        def advance(n: int) -> None:
            done[0] += n
            update(done[0], log.total)
        report = replay(kafka, settings, log, advance)
    typer.echo(f"{report.events} events -> {report.records} {projection} records into "
               f"{report.destination} in {report.wall_s:.2f}s "
               f"({report.events_per_cpu_s:,.0f} events per CPU-second)")


def _default_target(kafka: KafkaSettings, projection: str, end: int) -> str:
    names = TopicNames(kafka.topic_prefix)
    base = {"audit": names.audit, "trajectory": names.trajectory,
            "user-view": names.user_view, "memory": names.memory}[projection]
    return f"{base}.replay-{end}"


@trajectories_app.command("export")
def trajectories_export(
    out: Annotated[Path, typer.Option(help="Output file.")],
    format_: Annotated[str, typer.Option("--format", help="jsonl | avro")] = "jsonl",
    topic: Annotated[str | None, typer.Option(
        help="Trajectory topic (default: <prefix>.eval.trajectory).")] = None,
    from_events: Annotated[bool, typer.Option(
        "--from-events", help="Fold the events log instead of reading the trajectory topic.")]
    = False,
    events_topic: EventsTopic = None,
) -> None:
    """Write every run's latest trajectory (sorted by run id) as JSONL or Avro."""
    if format_ not in ("jsonl", "avro"):
        raise ConfigError("--format", format_, "must be jsonl or avro")
    fmt: Format = "avro" if format_ == "avro" else "jsonl"
    count = export(KafkaSettings(), ExportSettings(out, fmt, topic, from_events, events_topic))
    typer.echo(f"{count} trajectories -> {out} ({fmt})")

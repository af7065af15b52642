"""`runfacts outbox ...`: run the relay, show an outbox's backlog, unpark a run, install tables.

Also runnable as `python -m runfacts.cli outbox relay --db ...` (the whole command tree).
(the crash tests start it that way and kill -9 it).
"""

from __future__ import annotations

import json
import logging
import signal
from typing import Annotated, Any

import typer

from runfacts.connectors.outbox.store import OutboxStore, connect
from runfacts.connectors.outbox.writer import install as install_tables
from runfacts.connectors.relay import Relay, RelaySettings
from runfacts.schemas.errors import ConfigError
from runfacts.settings import KafkaSettings

app = typer.Typer(name="outbox", help="Transactional outbox: relay and operations.",
                  no_args_is_help=True, pretty_exceptions_enable=False)

Db = Annotated[str, typer.Option(help="postgresql:// DSN or SQLite file path")]
Table = Annotated[str, typer.Option(help="outbox table name")]


@app.command()
def relay(
    db: Db,
    bootstrap: Annotated[str | None, typer.Option(
        help="Kafka bootstrap servers (default: RUNFACTS_KAFKA_BOOTSTRAP_SERVERS)")] = None,
    table: Table = "runfacts_outbox",
    batch_size: int = 2000,
    poll_interval: float = 1.0,
    lease_ttl: float = 10.0,
    retention: Annotated[float, typer.Option(help="keep published rows this many s")] = 0.0,
    archive: Annotated[bool, typer.Option(help="move published rows to <table>_archive")] = False,
    exit_when_idle: Annotated[bool, typer.Option(help="exit once nothing is pending")] = False,
    holder: Annotated[str, typer.Option(help="lease holder id (default: random)")] = "",
    transactional_id: Annotated[str, typer.Option(
        help="Kafka transactional.id (default: <prefix>-outbox-<table>-<the outbox's relay id>)")] = "",
) -> None:
    """Publish the outbox to Kafka until SIGTERM/SIGINT (or idle, with --exit-when-idle).

    Kafka settings come from RUNFACTS_KAFKA_* like every client (SASL/TLS through
    RUNFACTS_KAFKA_CONFIG or RUNFACTS_KAFKA_PROPERTIES); --bootstrap overrides the servers.
    """
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        settings = relay_settings(db=db, bootstrap=bootstrap, table=table, batch_size=batch_size,
                                  poll_interval_s=poll_interval, lease_ttl_s=lease_ttl,
                                  retention_s=retention, archive=archive,
                                  exit_when_idle=exit_when_idle, transactional_id=transactional_id)
        worker = Relay(settings, holder=holder)
    except ConfigError as exc:  # e.g. the outbox is not installed: one line naming the fix
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: worker.stop())
    worker.run()


def relay_settings(bootstrap: str | None = None, kafka: KafkaSettings | None = None,
                   **options: Any) -> RelaySettings:
    """RelaySettings from the cluster settings (`KafkaSettings`, RUNFACTS_KAFKA_*) and `options`."""
    kafka = kafka or KafkaSettings()
    config = kafka.client_config()
    servers = bootstrap or config.pop("bootstrap.servers")
    config.pop("bootstrap.servers", None)
    return RelaySettings(bootstrap=servers, producer_config=config, prefix=kafka.topic_prefix,
                         **options)


def _installed(db: str, table: str) -> OutboxStore:
    """The outbox's store, or one line naming `runfacts outbox install --db ...` and exit 2."""
    store = OutboxStore.open(db, table)
    try:
        store.check_installed()
    except ConfigError as exc:
        store.close()
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    return store


@app.command()
def status(db: Db, table: Table = "runfacts_outbox") -> None:
    """Print pending rows, oldest pending age, the lease and parked runs as JSON."""
    store = _installed(db, table)
    try:
        metrics = store.metrics()
        holder, token, left = store.lease_state()
        report = {"pending": metrics.pending,
                  "oldest_pending_age_s": round(metrics.oldest_pending_age_s, 3),
                  "lease": {"holder": holder, "token": token, "expires_in_s": round(left, 3)},
                  "parked": [vars(p) for p in store.parked()]}
    finally:
        store.close()
    typer.echo(json.dumps(report, indent=2))


@app.command()
def unpark(db: Db, run_id: str, table: Table = "runfacts_outbox") -> None:
    """Let a parked run publish again once the cause (missing topic, size) is fixed."""
    store = _installed(db, table)
    try:
        found = store.unpark(run_id)
    finally:
        store.close()
    typer.echo(f"run {run_id}: {'unparked' if found else 'was not parked'}")
    raise typer.Exit(0 if found else 1)


@app.command()
def install(db: Db, table: Table = "runfacts_outbox") -> None:
    """Create the outbox tables (idempotent)."""
    conn = connect(db)
    try:
        install_tables(conn, table)
    finally:
        conn.close()
    typer.echo(f"outbox {table} installed")


"""`runfacts outbox ...`: run the relay, show an outbox's backlog, unpark a run, install tables;
print the Debezium connector that publishes a PostgreSQL outbox instead, prune what it captured.

Also runnable as `python -m runfacts.cli outbox relay --db ...` (the whole command tree).
(the crash tests start it that way and kill -9 it).
"""

from __future__ import annotations

import json
import logging
import signal
from typing import Annotated, Any

import typer

from runfacts.connectors.outbox.debezium import DebeziumOutbox
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



Prefix = Annotated[str, typer.Option(help="runfacts topic prefix (RUNFACTS_KAFKA_TOPIC_PREFIX), e.g. runfacts")]


@app.command("debezium-config")
def debezium_config(
    dsn: Annotated[str, typer.Option(help="postgresql:// DSN of the outbox's database (as Debezium reaches it)")],
    prefix: Prefix,
    table: Table = "runfacts_outbox",
    schema: Annotated[str, typer.Option(help="the table's PostgreSQL schema")] = "public",
    kind: Annotated[str, typer.Option(help="commands (a CommandOutbox) or events")] = "commands",
    snapshot: Annotated[str, typer.Option(
        help="initial: publish the rows already in the table first; no_data: only rows written later")] = "initial",
    poll_interval_ms: Annotated[int, typer.Option(help="Debezium's poll.interval.ms")] = 50,
    name: Annotated[str, typer.Option(help="connector name (default runfacts-outbox-<prefix>-<table>)")] = "",
) -> None:
    """Print the Kafka Connect connector (JSON) that publishes this outbox with Debezium.

    Apply it with `scripts/kafka-connect.sh apply FILE` (or POST it to /connectors). The record
    on the topic equals the relay's: key runId, the Avro bytes, the decider's headers. Never run
    the relay on the same table as well. A password in --dsn is printed in the config.
    """
    try:
        connector = DebeziumOutbox(dsn, prefix, table=table, schema=schema, kind=kind,  # type: ignore[arg-type]
                                   snapshot=snapshot, poll_interval_ms=poll_interval_ms, name=name)
        typer.echo(connector.as_json())
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


@app.command()
def prune(
    db: Db,
    prefix: Prefix,
    table: Table = "runfacts_outbox",
    older_than: Annotated[float, typer.Option(help="delete rows created more than this many s ago")] = 3600.0,
) -> None:
    """Delete old rows of an outbox that Debezium publishes (the relay's --retention does it otherwise).

    Debezium decodes the WAL, so a committed row is captured whether or not it is still in the
    table; the command refuses unless the connector's replication slot and publication exist.
    Run it after the connector's first start finished its initial snapshot.
    """
    store = _installed(db, table)
    connector = DebeziumOutbox(db, prefix, table=table)
    try:
        removed = store.prune_captured(connector.slot, f"{connector.slot}_pub", older_than)
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    finally:
        store.close()
    typer.echo(f"outbox {table}: {removed} rows pruned")

"""The outbox relay: publishes committed outbox rows to Kafka, at least once, in order per run.

Loop (`Relay.run`), one active relay per outbox:
1. Without the lease: try to take it (it must have expired); else wait and retry. On taking
   it, start a fresh transactional producer (init_transactions fences any older producer).
2. Heartbeat: renew the lease every ttl/3; if it was taken over, drop it and go to 1.
3. Fetch up to batch_size pending rows in seq order, skipping runs parked at or before them.
4. Park (fenced) every run whose next row targets a missing topic; drop its later rows.
5. Publish the rest in one Kafka transaction and wait for every delivery report.
6. Failed: nothing was published. Park runs with a permanent error (fenced), back off on a
   transient one, and go to 2. The other runs publish on the next pass.
7. Committed: mark the rows published in one DB transaction fenced by the lease token
   (a refused mark means another relay took over: go to 1; its rows get republished).
8. Idle (fewer rows than batch_size): sweep retention when due, then wait for a NOTIFY
   (PostgreSQL) or the poll interval. Every metrics_interval, log a metrics line.

A crash between 5 and 7 republishes the batch: duplicates with the same eventId, in the same
order, never a loss. Consumers dedupe by eventId (`runfacts.connectors.outbox.inbox`).
Telemetry (when enabled): a `relay publish` span per batch, linked to the trace context each
row carries in its headers; the outbox backlog as a gauge with every metrics line.
"""

from __future__ import annotations

import json
import logging
import random
import sqlite3
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from runfacts import telemetry
from runfacts.connectors.outbox.store import Lease, LeaseLost, OutboxMetrics, OutboxStore, is_postgres_dsn
from runfacts.connectors.outbox.writer import decode_headers
from runfacts.connectors.relay.decisions import RateWindow, backoff_s, first_rows_to, settle, without_parked
from runfacts.connectors.relay.publisher import KafkaPublisher, PublisherSettings
from runfacts.crashpoints import crash_point
from runfacts.schemas.errors import ConfigError, InfrastructureError

log = logging.getLogger("runfacts.relay")


def db_errors() -> tuple[type[BaseException], ...]:
    """Connection-level database errors: back off and reconnect. psycopg's only once something
    imported it (a PostgreSQL outbox does, before it can raise one): importing it here would
    load ~12 MB into every client process (the gateway's memory bar, benchmarks/gateway_bench.py)."""
    psycopg = sys.modules.get("psycopg")
    if psycopg is None:
        return (sqlite3.OperationalError,)
    return (sqlite3.OperationalError, psycopg.OperationalError)

T = TypeVar("T")


@dataclass(frozen=True)
class RelaySettings:
    """One relay for one outbox table. `db` is a postgresql:// DSN or a SQLite file path."""

    db: str
    bootstrap: str
    table: str = "runfacts_outbox"
    batch_size: int = 2000
    poll_interval_s: float = 1.0
    lease_ttl_s: float = 10.0
    retention_s: float = 0.0
    archive: bool = False
    sweep_interval_s: float = 5.0
    metrics_interval_s: float = 10.0
    backoff_base_s: float = 0.1
    backoff_cap_s: float = 5.0
    missing_topic_grace_s: float = 15.0
    """A topic the cluster does not list holds its runs' rows this long before they are parked:
    a topic just created is listed by the broker a moment after the controller made it."""
    exit_when_idle: bool = False
    kafka_timeout_s: float = 30.0
    transactional_id: str = ""  # default: transactional_id_for(prefix, table, the outbox's relay id)
    prefix: str = "runfacts"
    producer_config: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("batch_size", "poll_interval_s", "lease_ttl_s"):
            if getattr(self, name) <= 0:
                raise ConfigError(name, getattr(self, name), "must be > 0")
        if self.retention_s < 0:
            raise ConfigError("retention_s", self.retention_s, "must be >= 0")
        if self.missing_topic_grace_s < 0:
            raise ConfigError("missing_topic_grace_s", self.missing_topic_grace_s, "must be >= 0")

    def publisher(self, relay_id: str) -> PublisherSettings:
        """Producer settings; `relay_id` is the outbox's (`OutboxStore.relay_id`)."""
        tid = self.transactional_id or transactional_id_for(self.prefix, self.table, relay_id)
        return PublisherSettings(self.bootstrap, tid, self.kafka_timeout_s,
                                 dict(self.producer_config))


def transactional_id_for(prefix: str, table: str, relay_id: str) -> str:
    """`<prefix>-outbox-<table>-<relay id>`: one per outbox database, stable across restarts.

    Relays of the same outbox share it (a successor fences its predecessor at the broker);
    relays of two databases never do. The outbox-relay ACL grants the `<prefix>-outbox-` prefix.
    """
    return f"{prefix}-outbox-{table}-{relay_id}"


@dataclass(frozen=True)
class RelayMetrics:
    """The backlog (from the database) plus this relay's publish counters."""

    outbox: OutboxMetrics
    published_total: int
    publish_rate_per_s: float
    lease_token: int | None


class SleepWaker:
    """Polling wake-up (SQLite): wait the timeout or until stopped."""

    def __init__(self, stopping: threading.Event) -> None:
        self._stopping = stopping

    def wait(self, timeout_s: float) -> None:
        self._stopping.wait(timeout_s)

    def close(self) -> None:
        """Nothing to release."""


class PgWaker:
    """LISTEN/NOTIFY wake-up with the poll interval as a fallback timeout."""

    SLICE_S = 0.5  # how often a long wait checks for stop()

    def __init__(self, dsn: str, channel: str, stopping: threading.Event) -> None:
        import psycopg

        self._stopping = stopping
        self._conn = psycopg.connect(dsn, autocommit=True)
        self._conn.execute(f"LISTEN {channel}")

    def wait(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not self._stopping.is_set():
            left = deadline - time.monotonic()
            if left <= 0 or self._notified(min(left, self.SLICE_S)):
                return

    def _notified(self, timeout_s: float) -> bool:
        got = sum(1 for _ in self._conn.notifies(timeout=timeout_s, stop_after=1))
        if got:
            for _ in self._conn.notifies(timeout=0.0):
                pass  # drain: one pass serves every commit so far
        return got > 0

    def close(self) -> None:
        self._conn.close()


class Relay:
    """Publishes one outbox to Kafka (see the module docstring for the loop)."""

    def __init__(self, settings: RelaySettings, holder: str = "") -> None:
        self.settings = settings
        self.holder = holder or f"relay-{uuid.uuid4().hex[:12]}"
        self.store = OutboxStore.open(settings.db, settings.table)
        try:
            self.relay_id = self.store.relay_id()
        except BaseException:
            self.store.close()
            raise
        self.lease: Lease | None = None
        self._stopping = threading.Event()
        self._publisher: KafkaPublisher | None = None
        self._waker = self._make_waker()
        self._rate = RateWindow()
        self._failures = 0
        self._missing_since: dict[str, float] = {}  # topic -> when the cluster first did not list it
        self.idle = False
        self._next_renew = self._next_sweep = self._next_metrics = 0.0

    def _make_waker(self) -> SleepWaker | PgWaker:
        if is_postgres_dsn(self.settings.db):
            return PgWaker(self.settings.db, self.store.sql.channel, self._stopping)
        return SleepWaker(self._stopping)

    def stop(self) -> None:
        """Ask the loop to finish its current step and exit (releasing the lease)."""
        self._stopping.set()

    def run(self) -> None:
        """Run the loop until `stop()` (or, with exit_when_idle, until nothing is pending)."""
        try:
            while not self._stopping.is_set():
                if self.lease is None:
                    self._acquire_or_wait()
                    continue
                crash_point("relay.holding_lease")
                self._guarded_step()
                if self.idle and self.settings.exit_when_idle:
                    return
        finally:
            self.close()

    def _acquire_or_wait(self) -> None:
        lease = self.store.try_acquire(self.holder, self.settings.lease_ttl_s)
        if lease is None:
            self._stopping.wait(min(1.0, self.settings.lease_ttl_s / 4))
            return
        log.info("lease taken holder=%s token=%d", lease.holder, lease.token)
        self._drop_publisher()
        self.lease, self._next_renew = lease, time.monotonic() + self.settings.lease_ttl_s / 3
        self._guard(self._publisher_now)  # init_transactions now, not on the first event

    def _guarded_step(self) -> int | None:
        """One pass (steps 2-8); None when it failed and backed off."""
        published = self._guard(self.step)
        if published is not None:
            self._failures = 0
        return published

    def _guard(self, action: Callable[[], T]) -> T | None:
        """Run `action`; on a lost lease, infrastructure or database error, recover and None."""
        try:
            return action()
        except LeaseLost as exc:
            log.warning("%s; waiting to take the lease again", exc)
            self.lease = None
            self._drop_publisher()
        except InfrastructureError as exc:
            self._back_off(str(exc))
            self._drop_publisher()
        except db_errors() as exc:
            self._back_off(f"database: {exc}")
            self._reconnect()
        return None

    def _reconnect(self) -> None:
        for resource in (self._waker, self.store):
            try:
                resource.close()
            except Exception as exc:  # already broken; we replace it below
                log.debug("close failed: %s", exc)
        try:
            self.store = OutboxStore.open(self.settings.db, self.settings.table)
            self._waker = self._make_waker()
        except db_errors() as exc:  # still down: the next step fails on the closed one again
            log.warning("reconnect failed: %s", exc)

    def step(self) -> int:
        """Steps 2-8 once; the number of rows published (and marked)."""
        assert self.lease is not None, "step() needs the lease"
        self._heartbeat()
        rows = self.store.fetch_pending(self.settings.batch_size)
        self.idle = not rows
        publishable = self._park_missing_topics(rows)
        published = self._publish(publishable) if publishable else 0
        if len(rows) < self.settings.batch_size:
            self._housekeeping()
            if not (self.settings.exit_when_idle and not rows):
                self._waker.wait(self._wait_s())
        return published

    def _heartbeat(self) -> None:
        assert self.lease is not None
        now = time.monotonic()
        if now < self._next_renew:
            return
        if not self.store.renew(self.lease, self.settings.lease_ttl_s):
            raise LeaseLost(self.settings.table, self.lease.token)
        self._next_renew = now + self.settings.lease_ttl_s / 3

    def _wait_s(self) -> float:
        until_renew = max(0.0, self._next_renew - time.monotonic())
        return min(self.settings.poll_interval_s, until_renew)

    def _publisher_now(self) -> KafkaPublisher:
        """The producer; a new one only after re-checking the lease, so a stale relay never
        fences the current one's producer at the broker."""
        if self._publisher is None:
            self._next_renew = 0.0
            self._heartbeat()
            self._publisher = KafkaPublisher(self.settings.publisher(self.relay_id))
        return self._publisher

    def _park_missing_topics(self, rows: list[Any]) -> list[Any]:
        """Rows to topics the cluster lists; a run's rows from its first row to a missing topic on
        are held back (order per run), and parked once the topic stayed missing for the grace."""
        if not rows:
            return rows
        missing = self._publisher_now().missing_topics({row.topic for row in rows})
        now = time.monotonic()
        for topic in list(self._missing_since):
            if topic not in missing:
                del self._missing_since[topic]
        if not missing:
            return rows
        first = first_rows_to(rows, missing)
        for topic in missing:
            if topic not in self._missing_since:
                self._missing_since[topic] = now
                log.warning("topic %s is not listed by the cluster; holding its runs' rows for up to %.0fs "
                            "before parking them (create the topic, or fix the rows' topic)",
                            topic, self.settings.missing_topic_grace_s)
        for row in first.values():
            if now - self._missing_since[row.topic] >= self.settings.missing_topic_grace_s:
                self._park(row, f"UNKNOWN_TOPIC_OR_PART: topic {row.topic} does not exist")
        return without_parked(rows, {run: row.seq for run, row in first.items()})

    def _publish(self, rows: list[Any]) -> int:
        assert self.lease is not None
        tel = telemetry.current()
        if tel.enabled:
            links = [decode_headers(row.headers) for row in rows]
            with tel.span("relay publish", attributes={"runfacts.outbox": self.settings.table,
                                                       "runfacts.rows": len(rows)}, links=links):
                failures = self._publisher_now().publish(rows)
        else:
            failures = self._publisher_now().publish(rows)
        settlement = settle(rows, failures)
        for row, error in settlement.park:
            self._park(row, error)
        if settlement.back_off:
            raise InfrastructureError("publish failed transiently; batch aborted", retryable=True)
        if not settlement.mark:
            return 0
        crash_point("relay.after_publish_before_mark")
        self.store.mark_published(settlement.mark, self.lease)
        self._rate.add(time.monotonic(), len(settlement.mark))
        return len(settlement.mark)

    def _park(self, row: Any, error: str) -> None:
        assert self.lease is not None
        self.store.park(row, error, self.lease)
        log.error("parked run=%s from seq=%d event=%s topic=%s: %s",
                  row.run_id, row.seq, row.event_id, row.topic, error)

    def _back_off(self, why: str) -> None:
        self._failures += 1
        delay = backoff_s(self._failures, self.settings.backoff_base_s,
                          self.settings.backoff_cap_s, jitter=random.uniform(0.5, 1.0))
        log.warning("retrying in %.2fs (failure %d): %s", delay, self._failures, why)
        self._stopping.wait(delay)

    def _housekeeping(self) -> None:
        now = time.monotonic()
        if now >= self._next_sweep:
            self.store.sweep(self.settings.retention_s, self.settings.archive)
            self._next_sweep = now + self.settings.sweep_interval_s
        if now >= self._next_metrics:
            metrics = self._metrics_dict()
            log.info("metrics %s", json.dumps(metrics))
            telemetry.current().gauge(telemetry.OUTBOX_PENDING, metrics["pending"], {"outbox": metrics["table"]})
            self._next_metrics = now + self.settings.metrics_interval_s

    @property
    def consecutive_failures(self) -> int:
        """Failed passes in a row (each followed by a backoff); 0 after a good pass."""
        return self._failures

    @property
    def published_total(self) -> int:
        """Rows this relay published and marked since it started."""
        return self._rate.total

    def metrics(self) -> RelayMetrics:
        """Rows pending, oldest pending age, parked runs, and this relay's publish rate."""
        now = time.monotonic()
        token = None if self.lease is None else self.lease.token
        return RelayMetrics(self.store.metrics(), self._rate.total, self._rate.rate(now), token)

    def _metrics_dict(self) -> dict[str, Any]:
        m = self.metrics()
        return {"table": self.settings.table, "pending": m.outbox.pending,
                "oldest_pending_age_s": round(m.outbox.oldest_pending_age_s, 3),
                "parked_runs": m.outbox.parked_runs, "published_total": m.published_total,
                "publish_rate_per_s": round(m.publish_rate_per_s, 1), "token": m.lease_token}

    def _drop_publisher(self) -> None:
        if self._publisher is not None:
            self._publisher.close()
            self._publisher = None

    def close(self) -> None:
        """Release the lease (so a successor need not wait), close producer and connections."""
        self._drop_publisher()
        if self.lease is not None:
            try:
                self.store.release(self.lease)
            except Exception as exc:  # closing anyway: the lease then simply expires
                log.warning("lease release failed: %s", exc)
            self.lease = None
        self._waker.close()
        self.store.close()

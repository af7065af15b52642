"""The client's ONE consumer of the events topic, and the waiters it wakes (shell).

Steps of the follower thread:
1. At start, assign every partition of the events topic at its end (read_committed: the last
   stable offset, so a decider transaction open at that moment is still seen when it commits);
   the client is handed out only once every partition reported its position (a record or its
   end), so the answer to a first command cannot land before the follower's start.
2. Each batch: for every record of a *watched* run on that run's partition (the key is the
   runId; others, and a copy on another partition, are skipped undecoded), decode the event
   and append it to the run's journal, deduplicated by offset.
3. After the batch, re-check the waiters of every run that gained events, and the
   command-outcome waiters of every partition that reached its end.
A waiter resolves with a pure check over the journal (`runfacts.client.outcomes`), through a
threading.Event (blocking form) or an asyncio future (awaitable form): thousands of waiting
runs cost thousands of small journal entries, not thousands of consumers.

A run watched after its first events (re-attach after a restart) is backfilled: its partition
is read from the start, by a short-lived reader, up to the end it has after the watch began;
overlap with what the follower appends meanwhile is removed by offset.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaError, TopicPartition

from runfacts.client import outcomes
from runfacts.client.errors import ClientError
from runfacts.client.outcomes import Entry, Resolved
from runfacts.logread import consume_ready, partition_count
from runfacts.partitioning import owner, partition_for
from runfacts.schemas.codec import Codec
from runfacts.schemas.errors import InfrastructureError, InvalidInput, RecordPosition
from runfacts.schemas.models import decode_event
from runfacts.settings import KafkaSettings
from runfacts.topics import group_prefix, reader_group

log = logging.getLogger("runfacts.client")
Check = Callable[["Journal"], Resolved | None]


@dataclass(frozen=True)
class FollowerSettings:
    """Where the events are and how the follower reads them."""

    topic: str
    prefix: str = "runfacts"
    component: str = "client"
    metadata_timeout_s: float = 10.0
    backfill_timeout_s: float = 60.0


class Detached(Exception):  # noqa: N818 - a signal to the caller, never raised to users
    """The journal was let go: watch the run again and retry."""


class Waiter:
    """One wait: a check over a run's journal and how to wake its caller."""

    __slots__ = ("check", "tail", "done", "resolved", "future", "loop")

    def __init__(self, check: Check, tail: bool, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.check, self.tail = check, tail
        self.done = threading.Event()
        self.resolved: Resolved | None = None
        self.loop = loop
        self.future: asyncio.Future[Any] | None = loop.create_future() if loop is not None else None

    def resolve(self, resolved: Resolved) -> None:
        self.resolved = resolved
        self.done.set()
        if self.future is not None and self.loop is not None:
            self.loop.call_soon_threadsafe(_settle, self.future, resolved)


def _settle(future: asyncio.Future[Any], resolved: Resolved) -> None:
    if future.done():
        return
    if resolved.error is not None:
        future.set_exception(resolved.error)
    else:
        future.set_result(resolved.value)


@dataclass
class Journal:
    """A watched run's events in log order, and who waits on them."""

    run_id: str
    partition: int
    entries: list[Entry] = field(default_factory=list)
    offsets: set[int] = field(default_factory=set)
    waiters: list[Waiter] = field(default_factory=list)
    complete: bool = False
    """The journal holds the run from its first event (backfilled, or watched before it existed)."""
    detached: bool = False
    """The follower let it go (the run ended, nobody waited): it no longer grows."""
    broken: str | None = None
    """Why a fact of the run could not be read (its waits fail with it)."""

    def add(self, entry: Entry) -> None:
        if entry.offset in self.offsets:
            return
        self.offsets.add(entry.offset)
        self.entries.append(entry)
        if len(self.entries) > 1 and self.entries[-2].offset > entry.offset:
            self.entries.sort(key=lambda e: e.offset)


class Follower:
    """The events-topic follower: journals of watched runs, waiters woken after each batch."""

    def __init__(self, kafka: KafkaSettings, settings: FollowerSettings, codec: Codec | None = None) -> None:
        self.kafka, self.settings = kafka, settings
        self.codec = codec or Codec()
        self._decoder = partial(decode_event, self.codec)  # one for every entry it re-decodes
        self._lock = threading.RLock()
        self._journals: dict[str, Journal] = {}
        self._caught_up: dict[int, int] = {}
        self._tails: dict[int, set[str]] = {}  # runs with command-answer waiters, per partition
        self._stopping = threading.Event()
        self._consumer = self._new_consumer("latest")
        self.partitions = partition_count(self._consumer, settings.topic, settings.metadata_timeout_s)
        self._consumer.assign([TopicPartition(settings.topic, p, OFFSET_END) for p in range(self.partitions)])
        self._error: BaseException | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="runfacts-client-follower", daemon=True)
        self._thread.start()
        if not self._ready.wait(settings.metadata_timeout_s):  # positioned: no answer can slip past it
            self.close()
            raise InfrastructureError(f"the client's follower did not reach the end of {settings.topic} within "
                                      f"{settings.metadata_timeout_s:g}s", retryable=True)

    def _new_consumer(self, reset: str) -> Consumer:
        return _reader(self.kafka, self.settings, reset)

    # --- watching --------------------------------------------------------------------------

    def partition_of(self, run_id: str) -> int:
        return partition_for(run_id.encode(), self.partitions)

    def watching(self, run_id: str) -> bool:
        return run_id in self._journals


    def watch(self, run_id: str, backfill: bool = True) -> Journal:
        """The run's journal, started now; with backfill its earlier events are read first."""
        with self._lock:
            journal = self._journals.get(run_id)
            if journal is None:
                journal = self._journals[run_id] = Journal(run_id, self.partition_of(run_id))
        if backfill and not journal.complete:
            self.backfill([journal])
        return journal

    def watch_many(self, run_ids: Iterable[str]) -> list[Journal]:
        """Journals of many runs, backfilled with one read per partition."""
        new, out = [], []
        with self._lock:
            for run_id in run_ids:
                journal = self._journals.get(run_id)
                if journal is None:
                    journal = self._journals[run_id] = Journal(run_id, self.partition_of(run_id))
                if not journal.complete:
                    new.append(journal)
                out.append(journal)
        if new:
            self.backfill(new)
        return out

    def forget(self, run_id: str) -> None:
        """Drop a run's journal when nobody waits on it (a later watch backfills it again)."""
        with self._lock:
            journal = self._journals.get(run_id)
            if journal is not None and not journal.waiters:
                del self._journals[run_id]

    def backfill(self, journals: list[Journal]) -> None:
        """Read the journals' partitions from the start to their current end into them."""
        wanted: dict[int, set[bytes]] = {}
        for journal in journals:
            wanted.setdefault(journal.partition, set()).add(journal.run_id.encode())
        reader = self._new_consumer("earliest")
        try:
            found = read_runs(reader, self.settings.topic, wanted, self.codec, self.settings.backfill_timeout_s)
        finally:
            reader.close()
        with self._lock:
            for journal in journals:
                for entry in found.get(journal.run_id.encode(), ()):
                    journal.add(entry)
                journal.complete = True
                self._wake(journal, evict=False)  # just read back for a caller: not let go before it waits

    # --- waiting ---------------------------------------------------------------------------

    def add_waiter(self, journal: Journal, check: Check, tail: bool = False,
                   loop: asyncio.AbstractEventLoop | None = None) -> Waiter:
        """A waiter on the run; resolved at once when the journal already decides it.
        `tail`: it may only resolve once the follower read past the events it found.
        Raises Detached when the journal was let go (watch the run again)."""
        waiter = Waiter(check, tail, loop)
        with self._lock:
            if self._error is not None:
                raise InfrastructureError(f"the client's follower stopped: {self._error}", retryable=True)
            resolved = check(journal)
            if journal.broken is not None:
                waiter.resolve(Resolved(error=_as_client_error(journal.run_id, journal.broken)))
            elif resolved is not None:
                waiter.resolve(resolved)
            elif journal.detached:
                raise Detached(journal.run_id)
            else:
                journal.waiters.append(waiter)
                if tail:
                    self._tails.setdefault(journal.partition, set()).add(journal.run_id)
        return waiter

    def drop_waiter(self, journal: Journal, waiter: Waiter) -> None:
        with self._lock:
            if waiter in journal.waiters:
                journal.waiters.remove(waiter)

    def caught_up_to(self, partition: int) -> int:
        """The follower has read `partition` past every record before this offset (the offset of
        its latest record, or the end it reached)."""
        return self._caught_up.get(partition, -1)

    def _wake(self, journal: Journal, evict: bool = True) -> None:
        """Resolve what the journal now decides; an ended run nobody waits on is let go (its
        handles keep their journal; a later watch reads the run back)."""
        for waiter in list(journal.waiters):
            resolved = waiter.check(journal)
            if resolved is not None:
                journal.waiters.remove(waiter)
                waiter.resolve(resolved)
        if (evict and not journal.waiters and outcomes.ended(journal.entries)
                and self._journals.get(journal.run_id) is journal):
            journal.detached = True
            del self._journals[journal.run_id]

    # --- the thread ------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._stopping.is_set():
                self._batch(consume_ready(self._consumer, 500, 0.1))
        except BaseException as exc:  # noqa: BLE001 - reported to every waiter, then re-raised on wait
            log.exception("runfacts client follower stopped")
            self._fail_all(exc)
        finally:
            self._consumer.close()

    def _batch(self, messages: list[Any]) -> None:
        touched: set[str] = set()
        ends: set[int] = set()
        last: dict[int, int] = {}  # per partition, the offset of the batch's last record
        with self._lock:
            for msg in messages:
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        self._caught_up[msg.partition()] = msg.offset()
                        ends.add(msg.partition())
                    elif not err.retriable():
                        raise InfrastructureError(f"following {self.settings.topic}: {err}", retryable=False)
                    continue
                self._caught_up[msg.partition()] = msg.offset()
                ends.add(msg.partition())
                last[msg.partition()] = msg.offset()
                key = msg.key() or b""
                journal = self._journals.get(key.decode(errors="replace"))
                if journal is None or msg.value() is None:
                    continue
                if owner(key, self.partitions) != msg.partition():  # not the run's log (docs/semantics.md)
                    log.warning("skipped %s[%d]@%d: keyed %r but not on that run's partition", msg.topic(),
                                msg.partition(), msg.offset(), key[:80])
                    continue
                raw = msg.value()
                try:
                    event = decode_event(self.codec, raw, RecordPosition(msg.topic(), msg.partition(), msg.offset()))
                except InvalidInput as exc:  # only this run's waits fail, naming the record
                    self._break(journal, exc)
                    continue
                journal.add(Entry(msg.offset(), event, msg.timestamp()[1], raw, self._decoder))
                touched.add(journal.run_id)
            for partition, offset in last.items():
                self._at_end(partition, offset)
            for run_id in touched:
                journal = self._journals.get(run_id)
                if journal is not None:
                    self._wake(journal)
            for partition in ends:
                self._wake_tails(partition, touched)
            if not self._ready.is_set() and len(self._caught_up) == self.partitions:
                self._ready.set()

    def _at_end(self, partition: int, offset: int) -> None:
        """The partition's end, when the record at `offset` is its last committed one: the high
        watermark of the fetch that brought it (librdkafka's cached one) is at most `offset` + 2
        (the record, then its transaction's commit marker). A transaction's records are
        contiguous before its marker, so nothing of the record's transaction is still unread:
        a command's answer resolves now, not when the partition's EOF arrives one fetch wait
        (`fetch.wait.max.ms`, 20) later."""
        _low, high = self._consumer.get_watermark_offsets(TopicPartition(self.settings.topic, partition), cached=True)
        if offset < high <= offset + 2:
            self._caught_up[partition] = max(self._caught_up.get(partition, -1), high)

    def _wake_tails(self, partition: int, touched: set[str]) -> None:
        """Re-check the command-answer waiters of a partition the follower read further in."""
        runs = self._tails.get(partition, set())
        for run_id in list(runs):
            journal = self._journals.get(run_id)
            if journal is not None and run_id not in touched:
                self._wake(journal)
            if journal is None or not any(w.tail for w in journal.waiters):
                runs.discard(run_id)

    def _break(self, journal: Journal, exc: InvalidInput) -> None:
        """A fact of this run cannot be read: its waits fail now and later (nothing is skipped)."""
        log.error("runfacts client: run %s: %s", journal.run_id, exc)
        journal.broken = str(exc)
        for waiter in journal.waiters:
            waiter.resolve(Resolved(error=_as_client_error(journal.run_id, exc)))
        journal.waiters.clear()

    def _fail_all(self, exc: BaseException) -> None:
        error = InfrastructureError(f"the client's follower stopped: {exc}", retryable=True)
        with self._lock:
            self._error = exc
            for journal in self._journals.values():
                for waiter in journal.waiters:
                    waiter.resolve(Resolved(error=_as_client_error(journal.run_id, error)))
                journal.waiters.clear()

    def close(self) -> None:
        self._stopping.set()
        self._thread.join(10)


def _reader(kafka: KafkaSettings, settings: FollowerSettings, reset: str) -> Consumer:
    """A never-committing read_committed reader in a fresh group under the component's prefix."""
    group = reader_group(group_prefix(settings.prefix, settings.component))
    return Consumer(kafka.client_config(**{
        "group.id": group, "enable.auto.commit": False, "enable.partition.eof": True,
        "isolation.level": "read_committed", "auto.offset.reset": reset, "fetch.wait.max.ms": 20}))


def read_runs(reader: Consumer, topic: str, wanted: dict[int, set[bytes]], codec: Codec,
              timeout_s: float) -> dict[bytes, list[Entry]]:
    """The events of the runs keyed `wanted[partition]`, read from the start of those partitions
    to their current end (read_committed), in offset order."""
    reader.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in wanted])
    found: dict[bytes, list[Entry]] = {}
    decoder = partial(decode_event, codec)
    open_parts = set(wanted)
    deadline = time.monotonic() + timeout_s
    while open_parts:
        if time.monotonic() > deadline:
            raise InfrastructureError(f"reading runs from {topic} took over {timeout_s:g}s", retryable=True)
        for msg in consume_ready(reader, 1000, 0.1):
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    open_parts.discard(msg.partition())
                elif not err.retriable():
                    raise InfrastructureError(f"reading {topic}: {err}", retryable=False)
                continue
            key, partition, offset, value = msg.key() or b"", msg.partition(), msg.offset(), msg.value()
            if partition is not None and offset is not None and value is not None and key in wanted[partition]:
                event = decode_event(codec, value, RecordPosition(topic, partition, offset))
                found.setdefault(key, []).append(Entry(offset, event, msg.timestamp()[1], value, decoder))
    return found


def read_run(kafka: KafkaSettings, settings: FollowerSettings, run_id: str, codec: Codec | None = None) -> list[Entry]:
    """One run's facts, read once from its partition of the events topic (no follower needed)."""
    reader = _reader(kafka, settings, "earliest")
    try:
        count = partition_count(reader, settings.topic, settings.metadata_timeout_s)
        key = run_id.encode()
        found = read_runs(reader, settings.topic, {partition_for(key, count): {key}}, codec or Codec(),
                          settings.backfill_timeout_s)
    finally:
        reader.close()
    return found.get(key, [])


def _as_client_error(run_id: str, error: object) -> ClientError:
    return ClientError(run_id, str(error))

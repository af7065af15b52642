"""The key store (shell): the subjects' data keys in the compacted `<prefix>.keys` topic.

Record key `<ref>/<dek>` (one record per data key, never overwritten by another writer's
key), value the wrapped key with the subject's sealed name (`envelope.encode_record`).
Erasure is a tombstone (null value) for each of the subject's data keys: compaction then
removes the wrapped key, and every sealed field and pseudonym of the subject reads
`[erased]`. Writers only ever add a fresh `<ref>/<dek>`; the only deleter is the erasure
(`runfacts erase subject`, after the decider recorded the `subject.erased` fact). See
docs/decisions/0009-keys-topic.md.

`KeyTable` holds the logic over an in-memory copy (replay, create, erase, rewrap, view) and
publishes through a callable; `KeyStore` binds it to the topic (read to the end on open and
on `refresh`, one idempotent producer, each write flushed before it returns).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import TypeVar

from confluent_kafka import KafkaError, Producer
from pydantic import BaseModel

from runfacts.logread import read_to_end
from runfacts.privacy.envelope import (
    NO_KEYS,
    DataKeyRecord,
    KeyView,
    PrivacyKeys,
    decode_record,
    encode_record,
    pseudonym,
    unwrap,
    view_of,
    wrap,
)
from runfacts.privacy.fields import protect
from runfacts.privacy.keys import load_privacy_keys_if_configured, random_dek_id, random_key, random_nonce
from runfacts.schemas.errors import InfrastructureError
from runfacts.settings import KafkaSettings

Publish = Callable[[bytes, bytes | None], None]
M = TypeVar("M", bound=BaseModel)


class KeyTable:
    """The key records of every subject, and what writers and the eraser do with them."""

    def __init__(self, keys: PrivacyKeys, publish: Publish) -> None:
        self.keys, self.publish = keys, publish
        self.records: dict[bytes, DataKeyRecord] = {}
        self._active: dict[str, tuple[str, bytes]] = {}
        self._lock = threading.Lock()

    def apply(self, key: bytes, value: bytes | None) -> None:
        """Replay one record of the keys topic (a tombstone removes the key)."""
        if value is None:
            record = self.records.pop(key, None)
            if record is not None and self._active.get(record.ref, ("",))[0] == record.dek:
                del self._active[record.ref]
            return
        decoded = decode_record(value)
        if decoded is not None:
            self.records[key] = decoded

    def pseudonym(self, subject: str) -> str:
        """The subject's pseudonym; its first data key (with its sealed name) is created if none."""
        token = pseudonym(subject, self.keys)
        self._key(token[len("rfp1."):], subject)
        return token

    def data_key(self, ref: str) -> tuple[str, bytes]:
        """(dek id, secret) of the subject's data key, created when it has none."""
        return self._key(ref, None)

    def _key(self, ref: str, name: str | None) -> tuple[str, bytes]:
        with self._lock:
            found = self._active.get(ref) or self._find(ref)
            if found is None:
                dek, secret = random_dek_id(), random_key()
                record = wrap(self.keys, ref, dek, secret, random_nonce(), name, random_nonce())
                self.publish(record.key, encode_record(record))
                self.records[record.key] = record
                found = (dek, secret)
            self._active[ref] = found
            return found

    def _find(self, ref: str) -> tuple[str, bytes] | None:
        for record in self.records.values():
            if record.ref == ref:
                secret = unwrap(self.keys, record)
                if secret is not None:
                    return record.dek, secret
        return None

    def erase(self, ref: str) -> list[str]:
        """Tombstone every data key of subject `ref`; the dek ids erased."""
        with self._lock:
            doomed = [k for k, r in self.records.items() if r.ref == ref]
            for key in doomed:
                self.publish(key, None)
                del self.records[key]
            self._active.pop(ref, None)
        return sorted(k.decode().split("/", 1)[1] for k in doomed)

    def rewrap(self) -> int:
        """Rewrap every data key not under the current KEK (rotation); how many were rewrapped."""
        count = 0
        with self._lock:
            for key, record in list(self.records.items()):
                secret = unwrap(self.keys, record)
                if record.kek == self.keys.current or secret is None:
                    continue
                new = wrap(self.keys, record.ref, record.dek, secret, random_nonce(), None, random_nonce())
                new = DataKeyRecord(new.ref, new.dek, new.kek, new.wrapped, record.name)
                self.publish(key, encode_record(new))
                self.records[key] = new
                count += 1
        return count

    def view(self) -> KeyView:
        """What a reader needs: the live data keys, unwrapped, and the subjects' names."""
        return view_of(self.keys, dict(self.records))


class KeyStore(KeyTable):
    """The key table bound to the keys topic: read to its end on open, written through."""

    def __init__(self, kafka: KafkaSettings, topic: str, keys: PrivacyKeys, timeout_s: float = 30.0,
                 miss_refresh_s: float = 1.0) -> None:
        super().__init__(keys, self._produce)
        self.kafka, self.topic, self.timeout_s, self.miss_refresh_s = kafka, topic, timeout_s, miss_refresh_s
        self._producer: Producer | None = None
        self._loaded_at = 0.0
        self.refresh()

    def refresh(self) -> None:
        """Re-read the keys topic to its end (another process may have added or erased keys)."""
        found = read_to_end(self.kafka.bootstrap_servers, [self.topic], timeout_s=self.timeout_s,
                            config={k: v for k, v in self.kafka.client_config().items() if k != "bootstrap.servers"},
                            group_prefix="runfacts-keys")
        with self._lock:
            self.records.clear()
            self._active.clear()
        for record in found[self.topic]:
            if record.key is not None:
                self.apply(record.key, record.value)
        self._loaded_at = time.monotonic()

    def data_key(self, ref: str) -> tuple[str, bytes]:
        """As `KeyTable.data_key`; a subject this copy has never seen is first looked up in the
        topic again (another writer, e.g. the client that created the run, may have added its
        key since), at most once per `miss_refresh_s`, so a new subject does not get a second key."""
        if (ref not in self._active and time.monotonic() - self._loaded_at > self.miss_refresh_s
                and not any(r.ref == ref for r in list(self.records.values()))):
            self.refresh()
        return super().data_key(ref)

    def view_fresh(self, max_age_s: float = 5.0) -> KeyView:
        """`view()` after a refresh when the copy is older than `max_age_s` (long-lived readers)."""
        if time.monotonic() - self._loaded_at > max_age_s:
            self.refresh()
        return self.view()

    def _produce(self, key: bytes, value: bytes | None) -> None:
        if self._producer is None:
            self._producer = Producer(self.kafka.producer_config(**{"enable.idempotence": True, "acks": "all",
                                                                  "linger.ms": 0}))
        errors: list[str] = []

        def delivered(err: KafkaError | None, _msg: object) -> None:
            if err is not None:
                errors.append(str(err))

        self._producer.produce(self.topic, value, key, on_delivery=delivered)
        if self._producer.flush(self.timeout_s) or errors:
            why = errors[0] if errors else f"not delivered within {self.timeout_s:g}s"
            raise InfrastructureError(f"writing key record to {self.topic}: {why}", retryable=True)


class Protector:
    """What a writer applies to each command before it is encoded and signed (`fields.protect`).

    The data subject of a run's free text is its user: `subject` when the writer knows it (the
    dispatcher passes the run's `userId` pseudonym), else learned from the `run.create` this
    writer protected (bounded memory), else the command's actor.
    """

    def __init__(self, table: KeyTable, remember: int = 10_000) -> None:
        self.table, self.remember = table, remember
        self._runs: dict[str, str] = {}

    def __call__(self, command: M, subject: str | None = None) -> M:
        """`command` protected; its free text sealed for `subject` (a pseudonym or an id) when given."""
        subject = subject or self._runs.get(getattr(command, "runId", ""))
        protected = protect(command, self.table, random_nonce, subject)
        if getattr(protected, "commandType", None) == "run.create":
            if len(self._runs) >= self.remember:
                self._runs.pop(next(iter(self._runs)))
            self._runs[protected.runId] = protected.payload.userId  # type: ignore[attr-defined]
        return protected

    def view(self) -> KeyView:
        """The key view of this writer's table (fresh from the topic for a KeyStore)."""
        return self.table.view_fresh() if isinstance(self.table, KeyStore) else self.table.view()


def protector_if_configured(kafka: KafkaSettings, topic: str,
                            environ: Mapping[str, str] | None = None) -> Protector | None:
    """A Protector over the keys topic when privacy keys are configured (RUNFACTS_PII_KEYS[_FILE])."""
    keys = load_privacy_keys_if_configured(environ)
    return None if keys is None else Protector(KeyStore(kafka, topic, keys))


def view_if_configured(kafka: KafkaSettings, topic: str, environ: Mapping[str, str] | None = None) -> KeyView:
    """A reader's key view: the live keys when configured, else NO_KEYS (sealed values read `[encrypted]`)."""
    keys = load_privacy_keys_if_configured(environ)
    return NO_KEYS if keys is None else KeyStore(kafka, topic, keys).view()


def key_view_if_configured(kafka: KafkaSettings, topic: str,
                           environ: Mapping[str, str] | None = None) -> Callable[[], KeyView]:
    """A long-lived reader's source of key views (re-read when 5 s old), or always NO_KEYS."""
    keys = load_privacy_keys_if_configured(environ)
    if keys is None:
        return lambda: NO_KEYS
    store = KeyStore(kafka, topic, keys)
    return store.view_fresh

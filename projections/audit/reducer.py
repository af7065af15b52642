"""The audit projection: one immutable, hash-chained record per event (pure).

Per run the view is a `ChainHead` (runId, sequence, recordHash), `initial = None`;
`step(head, fact) -> (head', record body)` appends one link. A record names the event
(topic/partition/offset and its envelope exactly as written), who acted (producer in the
envelope; the payload's actor with its subject as a digest), what the event states
(`changes`, see `audit_summary`) and three hashes:

    eventHash  = SHA-256(the event's Avro body as written, no framing)
    recordHash = SHA-256(prevHash bytes || eventHash bytes || Avro body of the record's
                 fields before prevHash)          prevHash of sequence 1 = 64 zeros

so a changed, missing or reordered event or record breaks the chain at that link. Records
encode under `schemas/avro/projections/AuditRecord.v1.avsc`. `step` is the fast path
(generated per writer schema); `reference` builds the same record field by field and is
the readable spec the tests hold `step` to.
"""

from __future__ import annotations

from binascii import hexlify
from functools import cache
from hashlib import sha256
from typing import Any, NamedTuple

from runfacts.projections.audit.summary import (
    AuditConfig,
    Recorder,
    Summarizer,
    Summary,
    actor_of,
    changes_of,
    compile_recorder,
    compile_summarizer,
)
from runfacts.projections.facts import Fact
from runfacts.projections.records import MARKER, ProjectionSchema, load, prefix_schema
from runfacts.schemas.binary.readers import checked, compile_reader, write_long, write_string
from runfacts.schemas.binary.writers import compile_writer
from runfacts.schemas.catalog import default_catalog, envelope_prefix

GENESIS = "0" * 64
_GENESIS_DIGEST = bytes(32)
_HEX_PREFIX = write_long(64)
SCHEMA = "AuditRecord"
_new = tuple.__new__  # a NamedTuple without its Python-level __new__
DEFAULT = AuditConfig()


class AuditEnvelope(NamedTuple):
    """The event's envelope as written."""

    eventId: str
    eventType: str
    runId: str
    turnId: str | None
    producer: str
    reasoningObjectId: str | None
    capabilityId: str | None
    correlationId: str
    causationId: str | None
    schemaVersion: int
    occurredAt: int


class AuditActor(NamedTuple):
    """Who acted, without personal data."""

    subjectRef: str
    roles: tuple[str, ...]
    tenant: str | None
    authSource: str


class AuditChange(NamedTuple):
    """One payload leaf the event sets: its text value, or a digest of it."""

    path: str
    value: str | None
    digest: str | None


class AuditRecord(NamedTuple):
    """One link of a run's audit chain (field order = the Avro schema's)."""

    sequence: int
    topic: str
    partition: int
    offset: int
    event: AuditEnvelope
    actor: AuditActor | None
    changes: tuple[AuditChange, ...]
    prevHash: str
    eventHash: str
    recordHash: str

    @property
    def run_id(self) -> str:
        return self.event.runId


class ChainHead(NamedTuple):
    """The audit view of one run: where its chain ends (recordHash as raw digest bytes)."""

    runId: str
    sequence: int
    digest: bytes

    @property
    def recordHash(self) -> str:
        return self.digest.hex()


initial: ChainHead | None = None


def step(head: ChainHead | None, fact: Fact,
         config: AuditConfig = DEFAULT) -> tuple[ChainHead, bytes]:
    """The run's next head and the new record's Avro body."""
    return link(head, fact, summarize(fact, config))


def summarize(fact: Fact, config: AuditConfig = DEFAULT) -> Summary:
    """The run id, actor and changes of an event, read from its bytes (hosts call this first
    to find the run's head, then `link`)."""
    return _summarizer(fact.writer)(fact.body, config)


def link(head: ChainHead | None, fact: Fact, summary: Summary) -> tuple[ChainHead, bytes]:
    """Append the summarized event to the chain ending at `head`."""
    if head is not None and head.runId != summary.run_id:
        raise ValueError(f"audit chain of run {head.runId} fed an event of run "
                         f"{summary.run_id} at {fact.where()}")
    return chain(head, source(fact.topic, fact.partition), fact.offset, fact.body,
                 summary.envelope_end, summary.actor, summary.changes, summary.run_id)


def chain(head: ChainHead | None, where: bytes, offset: int, body: bytes, envelope_end: int,
          actor: bytes, changes: bytes, run_id: str) -> tuple[ChainHead, bytes]:
    """`link` from parts: `where` is `source(topic, partition)`, then the summary's fields;
    `head` must be the run's (the generated recorders call this, the replay's fast path)."""
    if head is None:
        sequence, prev = 1, _GENESIS_DIGEST
    else:
        sequence, prev = head[1] + 1, head[2]
    event_digest = sha256(body).digest()
    prefix = b"".join((write_long(sequence), where, write_long(offset), body[:envelope_end],
                       actor, changes))
    digest = sha256(prev + event_digest + prefix).digest()
    hexes = hexlify(prev + event_digest + digest)
    record = b"".join((prefix, _HEX_PREFIX, hexes[:64], _HEX_PREFIX, hexes[64:128],
                       _HEX_PREFIX, hexes[128:]))
    return _new(ChainHead, (run_id, sequence, digest)), record


@cache
def source(topic: str, partition: int) -> bytes:
    """The Avro encoding of a record's `topic` and `partition` fields."""
    return write_string(topic) + write_long(partition)


def _hash(prev: str, event_hash: str, prefix: bytes) -> str:
    return sha256(bytes.fromhex(prev) + bytes.fromhex(event_hash) + prefix).hexdigest()


def evolve(head: ChainHead | None, fact: Fact, config: AuditConfig = DEFAULT) -> ChainHead:
    """The run's head after `fact` (the record itself: `step`)."""
    return step(head, fact, config)[0]


def reference(head: ChainHead | None, fact: Fact, config: AuditConfig = DEFAULT) -> AuditRecord:
    """The record `step` encodes, built field by field (the spec)."""
    entry = default_catalog().by_fingerprint[fact.writer]
    values = _reader(fact.writer)(fact.body, 0)
    payload = values["payload"]
    envelope = AuditEnvelope(*(values[f["name"]] for f in envelope_prefix(entry.raw)["fields"]))
    actor = actor_of(payload.get("actor"), config)
    draft = AuditRecord(
        1 if head is None else head.sequence + 1, fact.topic, fact.partition, fact.offset,
        envelope, None if actor is None else AuditActor(*actor),
        tuple(AuditChange(*c) for c in changes_of(entry, payload, config)),
        GENESIS if head is None else head.recordHash, sha256(fact.body).hexdigest(), "")
    return draft._replace(recordHash=record_hash(draft))


def record_hash(record: AuditRecord) -> str:
    """The recordHash a record's own fields, prevHash and eventHash imply."""
    return _hash(record.prevHash, record.eventHash, _prefix_writer()(record))


def head_of(record: AuditRecord) -> ChainHead:
    """The chain head a record leaves."""
    return ChainHead(record.event.runId, record.sequence, bytes.fromhex(record.recordHash))


def encode(record: AuditRecord) -> bytes:
    """The record's Avro body (unframed)."""
    return schema().write_attrs(record)


def decode(body: bytes) -> AuditRecord:
    """An AuditRecord from its Avro body (unframed)."""
    return from_dict(_record_reader()(body, 0))


def from_dict(values: dict[str, Any]) -> AuditRecord:
    """An AuditRecord from the dict its schema decodes to."""
    actor = values["actor"]
    return AuditRecord(**{
        **values,
        "event": AuditEnvelope(**values["event"]),
        "actor": None if actor is None else AuditActor(**{**actor, "roles": tuple(actor["roles"])}),
        "changes": tuple(AuditChange(**c) for c in values["changes"]),
    })


def schema() -> ProjectionSchema:
    """The audit record's shipped schema."""
    return load(SCHEMA)


@cache
def recorders() -> dict[bytes, Recorder]:
    """`compile_recorder`s over `chain` keyed by the single-object header of the event values
    they read (C3 01 + fingerprint), for every shipped event schema: the replay's fast path."""
    return {MARKER + e.fingerprint: compile_recorder(e, chain) for e in default_catalog().entries
            if e.kind == "event"}


@cache
def _summarizer(fingerprint: bytes) -> Summarizer:
    entry = default_catalog().by_fingerprint.get(fingerprint)
    if entry is None or entry.kind != "event":
        raise KeyError(f"no shipped event schema with fingerprint {fingerprint.hex()}")
    return compile_summarizer(entry)


@cache
def _reader(fingerprint: bytes) -> Any:
    entry = default_catalog().by_fingerprint[fingerprint]
    return checked(compile_reader(entry.raw), f"{entry.fullname} v{entry.version}")


@cache
def _record_reader() -> Any:
    return checked(compile_reader(schema().raw), "AuditRecord v1")


@cache
def _prefix_writer() -> Any:
    return compile_writer(prefix_schema(schema().raw, "prevHash"), attrs=True)

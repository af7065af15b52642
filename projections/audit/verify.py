"""`runfacts audit verify`: recompute every audit chain from the events log and compare.

1. snapshot both topics (events and audit) as a read_committed consumer sees them now;
2. read them in alternating batches, so each run's unmatched links stay few;
3. feed events to `ChainCheck.expected` (bytes only: no payload decoding beyond the audit's
   own summarizer) and audit records to `ChainCheck.stored`;
4. report each run's first broken or missing link.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import zip_longest

from runfacts.logread import DataMessage, ReadOptions, batches, log_range
from runfacts.projections.audit import reducer as audit
from runfacts.projections.audit.check import ChainCheck, Finding
from runfacts.projections.audit.summary import AuditConfig
from runfacts.projections.eventlog import EventReader
from runfacts.projections.facts import ReadSettings
from runfacts.schemas.binary.readers import AvroDecodeError
from runfacts.schemas.errors import InvalidInput
from runfacts.settings import KafkaSettings
from runfacts.topics import TopicNames


@dataclass(frozen=True)
class VerifySettings:
    """Which topics to compare, for which run."""

    run_id: str | None = None
    events_topic: str | None = None
    audit_topic: str | None = None
    config: AuditConfig = AuditConfig()
    read: ReadOptions = ReadOptions()


@dataclass(frozen=True)
class VerifyReport:
    """What verification found."""

    events: int
    records: int
    runs_verified: int
    findings: list[Finding]
    keyed_records: int = 0
    """Stored records holding keyed (HMAC) digests."""
    key_given: bool = False

    @property
    def missing_key(self) -> bool:
        """The records hold keyed digests and no key was given: every link would mismatch, so
        the findings say nothing about tampering."""
        return self.keyed_records > 0 and not self.key_given

    @property
    def ok(self) -> bool:
        return not self.findings and not self.missing_key


def verify(kafka: KafkaSettings, settings: VerifySettings) -> VerifyReport:
    """Compare the audit topic with the chains the events topic implies."""
    names = TopicNames(kafka.topic_prefix)
    events_log = log_range(kafka, settings.events_topic or names.events, options=settings.read)
    audit_log = log_range(kafka, settings.audit_topic or names.audit, options=settings.read)
    check = ChainCheck(settings.run_id, settings.config)
    reader = EventReader(ReadSettings(decode=False))
    prefix = audit.schema().prefix()
    for event_batch, audit_batch in zip_longest(batches(kafka, events_log, settings.read),
                                                batches(kafka, audit_log, settings.read)):
        for message in event_batch or ():
            _event(check, reader, message)
        for message in audit_batch or ():
            _record(check, prefix, message)
    findings = check.finish()
    return VerifyReport(check.events, check.records, check.verified_runs, findings, check.keyed_records,
                        bool(settings.config.pii_key))


def _event(check: ChainCheck, reader: EventReader, message: DataMessage) -> None:
    where = f"{message.topic()}[{message.partition()}]@{message.offset()}"
    try:
        fact = reader.fact(message.value(), message.topic(), message.partition(),
                           message.offset())
        check.expected(fact)
    except (InvalidInput, AvroDecodeError, KeyError) as exc:
        check.unreadable(_key(message), where, f"event cannot be read: {exc}")


def _record(check: ChainCheck, prefix: bytes, message: DataMessage) -> None:
    where = f"{message.topic()}[{message.partition()}]@{message.offset()}"
    value = message.value() or b""
    if value[:10] != prefix:
        check.unreadable(_key(message), where, f"not an AuditRecord v1 (starts {value[:10].hex()})", record=True)
        return
    try:
        check.stored(value[10:], where)
    except (AvroDecodeError, ValueError, TypeError) as exc:
        check.unreadable(_key(message), where, f"audit record cannot be read: {exc}", record=True)


def _key(message: DataMessage) -> str:
    key = message.key()
    return key.decode(errors="replace") if key else "<no key>"


MISSING_KEY = ("the audit records hold keyed digests (hmac-sha256) and no audit key was given, so nothing "
               "can be verified: set RUNFACTS_AUDIT_PII_KEY (or --pii-key) to the projector's key")


def findings_lines(report: VerifyReport) -> Iterator[str]:
    """Human-readable lines of a report (one line naming the fix when the key is missing)."""
    if report.missing_key:
        yield f"{MISSING_KEY} ({report.keyed_records} keyed records read)"
        return
    for finding in report.findings:
        yield str(finding)
    verdict = "OK" if report.ok else f"FAILED: {len(report.findings)} run(s) with a broken link"
    yield (f"{verdict} ({report.events} events, {report.records} audit records, "
           f"{report.runs_verified} runs verified)")

"""Verification catches a changed, deleted or reordered event or audit record (pure check)."""

from __future__ import annotations

from projection_support import audit_records, facts_of, run_values

from runfacts.dev.runscript import encode_event
from runfacts.projections.audit import reducer as audit
from runfacts.projections.audit.check import ChainCheck
from runfacts.projections.audit.summary import AuditConfig
from runfacts.projections.audit.verify import VerifyReport, findings_lines
from runfacts.projections.eventlog import EventReader
from runfacts.projections.facts import Fact, ReadSettings

READ = ReadSettings(decode=False)


def _log():
    events = run_values(seed=9, runs=2)
    return events, facts_of(events, READ), audit_records(facts_of(events, READ))


def _check(facts: list[Fact], stored: list[bytes], run_id: str | None = None):
    check = ChainCheck(run_id)
    for fact in facts:
        check.expected(fact)
    for offset, body in enumerate(stored):
        check.stored(body, f"runfacts.audit[0]@{offset}")
    return check, check.finish()


def _relaid(values: list[bytes]) -> list[Fact]:
    reader = EventReader(READ)
    return [reader.fact(v, "runfacts.run.events", 0, o) for o, v in enumerate(values)]


def test_verification_passes_when_log_and_audit_are_untouched() -> None:
    events, facts, stored = _log()
    check, findings = _check(facts, stored)
    assert findings == []
    assert check.events == check.records == len(events) and check.verified_runs == 2


def test_verification_reports_the_link_when_one_event_byte_changed() -> None:
    events, facts, stored = _log()
    values = [encode_event(e) for e in events]
    target = 5
    tampered = bytearray(values[target])
    tampered[-3] ^= 0x01  # a byte inside the last payload string
    values[target] = bytes(tampered)
    _, findings = _check(_relaid(values), stored)
    run = events[target]["runId"]
    sequence = sum(1 for e in events[:target + 1] if e["runId"] == run)
    assert [(f.runId, f.sequence, f.kind) for f in findings] == [(run, sequence, "mismatch")]
    assert "eventHash" in findings[0].what and f"@{target}" in findings[0].where


def test_verification_reports_the_link_when_one_event_was_deleted() -> None:
    events, _, stored = _log()
    values = [encode_event(e) for e in events]
    del values[7]
    _, findings = _check(_relaid(values), stored)
    run = events[7]["runId"]
    sequence = sum(1 for e in events[:8] if e["runId"] == run)
    first = next(f for f in findings if f.runId == run)
    assert (first.sequence, first.kind) == (sequence, "mismatch")
    assert "event.eventId" in first.what


def test_verification_reports_the_link_when_two_events_were_swapped() -> None:
    events, _, stored = _log()
    values = [encode_event(e) for e in events]
    i = next(i for i in range(10, len(events) - 1) if events[i]["runId"] == events[i + 1]["runId"])
    values[i], values[i + 1] = values[i + 1], values[i]
    _, findings = _check(_relaid(values), stored)
    run = events[i]["runId"]
    assert [(f.runId, f.kind) for f in findings] == [(run, "mismatch")]
    assert findings[0].sequence == sum(1 for e in events[:i + 1] if e["runId"] == run)


def test_verification_reports_a_broken_chain_when_an_audit_record_was_deleted() -> None:
    _, facts, stored = _log()
    removed = audit.decode(stored[4])
    del stored[4]
    _, findings = _check(facts, stored)
    first = next(f for f in findings if f.runId == removed.run_id)
    assert (first.kind, first.sequence) == ("broken", removed.sequence + 1)
    assert "record missing or reordered" in first.what


def test_verification_reports_a_broken_chain_when_an_audit_record_was_edited() -> None:
    _, facts, stored = _log()
    record = audit.decode(stored[3])
    edited = record._replace(event=record.event._replace(producer="someone-else"))
    stored[3] = audit.encode(edited)
    _, findings = _check(facts, stored)
    assert [(f.runId, f.sequence, f.kind) for f in findings] == [
        (record.run_id, record.sequence, "broken")]
    assert "record altered" in findings[0].what


def test_verification_reports_missing_links_when_the_audit_stops_early() -> None:
    events, facts, stored = _log()
    _, findings = _check(facts, stored[:-3])
    last_run = events[-1]["runId"]
    assert any(f.runId == last_run and f.kind == "missing" for f in findings)


def test_verification_reports_an_extra_record_when_the_log_lacks_its_event() -> None:
    events, facts, stored = _log()
    last_run = events[-1]["runId"]
    _, findings = _check(facts[:-1], stored)
    assert [(f.runId, f.kind) for f in findings] == [(last_run, "extra")]


def test_verification_checks_one_run_when_a_run_id_is_given() -> None:
    events, facts, stored = _log()
    run = events[0]["runId"]
    check, findings = _check(facts, stored, run)
    assert findings == [] and check.events == sum(1 for e in events if e["runId"] == run)


def _keyed_records(facts: list[Fact], config: AuditConfig) -> list[bytes]:
    heads: dict[str, audit.ChainHead] = {}
    out = []
    for fact in facts:
        summary = audit.summarize(fact, config)
        heads[summary.run_id], body = audit.link(heads.get(summary.run_id), fact, summary)
        out.append(body)
    return out


def _verified(facts: list[Fact], stored: list[bytes], config: AuditConfig) -> VerifyReport:
    check = ChainCheck(None, config)
    for fact in facts:
        check.expected(fact)
    for offset, body in enumerate(stored):
        check.stored(body, f"runfacts.audit[0]@{offset}")
    findings = check.finish()
    return VerifyReport(check.events, check.records, check.verified_runs, findings, check.keyed_records,
                        bool(config.pii_key))


def test_verification_says_the_key_is_missing_when_keyed_records_are_checked_without_it() -> None:
    key = AuditConfig(b"the-projector-key")
    _, facts, _ = _log()
    stored = _keyed_records(facts, key)

    without = _verified(facts, stored, AuditConfig())
    under_key = _verified(facts, stored, key)

    assert without.missing_key and not without.ok
    lines = list(findings_lines(without))
    assert len(lines) == 1 and "RUNFACTS_AUDIT_PII_KEY" in lines[0] and "keyed digests" in lines[0]
    assert "mismatch" not in lines[0]
    assert without.findings and {f.kind for f in without.findings} == {"mismatch"}  # what it printed before
    assert under_key.ok and not under_key.missing_key and 0 < under_key.keyed_records < len(stored)


def test_verification_reports_tampering_not_a_missing_key_when_records_are_unkeyed() -> None:
    events, facts, stored = _log()
    values = [encode_event(e) for e in events]
    changed = bytearray(values[3])
    changed[-3] ^= 0x01
    values[3] = bytes(changed)

    report = _verified(_relaid(values), stored, AuditConfig())

    assert not report.missing_key and report.keyed_records == 0
    assert [f.kind for f in report.findings] == ["mismatch"]

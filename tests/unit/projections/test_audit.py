"""The audit reducer: one hash-chained record per event, personal data only as digests."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import HealthCheck, given, settings
from projection_support import facts_of, run_values, values_of

from runfacts.dev.runscript import encode_event
from runfacts.projections.audit import reducer as audit
from runfacts.projections.audit.summary import AuditConfig
from runfacts.projections.eventlog import EventReader, fact_of
from runfacts.projections.facts import ReadSettings
from runfacts.schemas.catalog import default_catalog
from runfacts.schemas.codec import Codec
from runfacts.schemas.events import ToolCallProposed, ToolCallProposedPayload
from runfacts.schemas.spec.samples import sample

ENTRIES = sorted((e for e in default_catalog().entries if e.kind == "event"),
                 key=lambda e: (e.fullname, e.version))
BYTES_ONLY = EventReader(ReadSettings(decode=False))
CODEC = Codec()
PROPERTY = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _fact(entry, values, offset=7):
    return BYTES_ONLY.fact(CODEC.encode_dict(values, entry.version), "runfacts.run.events", 2,
                           offset)


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: f"{e.type_name}-v{e.version}")
def test_step_encodes_the_reference_record_when_given_any_shipped_event_version(entry) -> None:
    head = None
    for seed in (1, 2):
        fact = _fact(entry, {**sample(entry, seed), "runId": "run-1"}, offset=seed)
        expected = audit.reference(head, fact)
        head, body = audit.step(head, fact)
        assert audit.decode(body) == expected
        assert audit.encode(expected) == body
        assert head == audit.head_of(expected)


@pytest.mark.parametrize("type_name", ["run.created", "tool.call.proposed", "tool.call.failed",
                                       "feedback.recorded", "budget.debited", "run.needs_review"])
def test_step_encodes_the_reference_record_when_payload_values_are_random(type_name) -> None:
    entry = default_catalog().by_type[type_name]

    @PROPERTY
    @given(values_of(entry))
    def check(values) -> None:
        fact = BYTES_ONLY.fact(_framed(entry, values), "events", 0, 3)
        assert audit.decode(audit.step(None, fact)[1]) == audit.reference(None, fact)

    check()


def _framed(entry, values) -> bytes:
    from runfacts.schemas.binary.writers import compile_writer

    return b"\xc3\x01" + entry.fingerprint + compile_writer(entry.raw)(values)


def test_records_chain_per_run_when_events_of_two_runs_interleave() -> None:
    facts = facts_of(run_values(seed=2, runs=2), ReadSettings(decode=False))
    heads: dict[str, audit.ChainHead] = {}
    records = []
    for fact in facts:
        summary = audit.summarize(fact)
        heads[summary.run_id], body = audit.link(heads.get(summary.run_id), fact, summary)
        records.append(audit.decode(body))
    for run_id in heads:
        chain = [r for r in records if r.run_id == run_id]
        assert [r.sequence for r in chain] == list(range(1, len(chain) + 1))
        assert chain[0].prevHash == audit.GENESIS
        assert all(b.prevHash == a.recordHash for a, b in zip(chain, chain[1:], strict=False))
        assert all(audit.record_hash(r) == r.recordHash for r in chain)


def test_event_hash_is_the_sha256_of_the_body_as_written_when_a_record_is_made() -> None:
    fact = facts_of(run_values(seed=3, runs=1), ReadSettings(decode=False))[0]
    record = audit.reference(None, fact)
    assert record.eventHash == hashlib.sha256(fact.body).hexdigest()
    assert record.event.eventType == "run.created"
    assert (record.topic, record.partition, record.offset) == ("runfacts.run.events", 0, 0)


def test_personal_fields_become_digests_when_a_run_is_created() -> None:
    created = run_values(seed=4, runs=1)[0]
    fact = facts_of([created], ReadSettings(decode=False))[0]
    record = audit.reference(None, fact)
    changes = {c.path: c for c in record.changes}
    user = created["payload"]["userId"]
    assert changes["payload.userId"].value is None
    assert changes["payload.userId"].digest == "sha256:" + hashlib.sha256(user.encode()).hexdigest()
    assert changes["payload.goalRef"].value == created["payload"]["goalRef"]
    subject = created["payload"]["actor"]["subjectId"]
    assert record.actor is not None and record.actor.subjectRef.startswith("sha256:")
    assert subject.encode() not in audit.encode(record)
    assert user.encode() not in audit.encode(record)


def test_digests_are_keyed_when_a_pii_key_is_configured() -> None:
    fact = facts_of(run_values(seed=4, runs=1), ReadSettings(decode=False))[0]
    plain = audit.reference(None, fact)
    keyed = audit.reference(None, fact, AuditConfig(pii_key=b"secret"))
    assert keyed.actor.subjectRef.startswith("hmac-sha256:")
    assert keyed.actor.subjectRef != plain.actor.subjectRef
    assert audit.decode(audit.step(None, fact, AuditConfig(b"secret"))[1]) == keyed


def test_long_values_become_digests_when_longer_than_256_bytes() -> None:
    event = ToolCallProposed(
        eventId="e1", runId="r1", producer="p", correlationId="c", occurredAt=1_700_000_000_000,
        payload=ToolCallProposedPayload(toolCallId="t" * 300, argsHash="h", argsRef="a",
                                        target="o", action="refund", risk="low", summary="s"))
    record = audit.reference(None, fact_of(event))
    change = next(c for c in record.changes if c.path == "payload.toolCallId")
    assert change.value is None and change.digest.startswith("sha256:")


def test_audit_of_an_old_version_records_it_as_written_when_tool_call_failed_is_v1() -> None:
    entry = default_catalog().entry("tool.call.failed", 1)
    fact = _fact(entry, sample(entry))
    record = audit.reference(None, fact)
    assert record.event.schemaVersion == 1
    assert "payload.message" in {c.path for c in record.changes}


def test_link_raises_when_fed_an_event_of_another_run() -> None:
    a, b = run_values(seed=5, runs=2)[0], None
    facts = facts_of(run_values(seed=5, runs=2), ReadSettings(decode=False))
    other = next(f for f in facts if audit.summarize(f).run_id != a["runId"])
    head = audit.evolve(b, facts[0])
    with pytest.raises(ValueError, match="fed an event of run"):
        audit.step(head, other)


def test_record_bytes_are_framed_as_single_object_when_encoded_for_a_topic() -> None:
    fact = facts_of(run_values(seed=6, runs=1), ReadSettings(decode=False))[0]
    body = audit.step(None, fact)[1]
    framed = audit.schema().frame(body)
    assert framed[:2] == b"\xc3\x01" and audit.schema().decode(framed)["sequence"] == 1
    assert encode_event(run_values(seed=6, runs=1)[0])[10:] == fact.body


def test_an_argument_display_is_a_digest_and_the_display_digest_is_kept_when_a_call_is_proposed() -> None:
    """The display's fields hold personal values (personalValue): never in the audit record,
    however short; the displayDigest an auditor checks the approval token against is kept."""
    from runfacts.schemas.common import ArgDisplay, ArgField

    display = ArgDisplay(fields=(ArgField(name="amount_cents", value="10", unit="cents"),
                                 ArgField(name="customer", personalValue='"Ada"', pii=True)))
    event = ToolCallProposed(
        eventId="e1", runId="r1", producer="p", correlationId="c", occurredAt=1_700_000_000_000,
        payload=ToolCallProposedPayload(toolCallId="t1", argsHash="h", argsRef="a", target="o", action="credit",
                                        risk="low", summary="s", display=display, displayDigest="d" * 64))
    record = audit.reference(None, fact_of(event))
    changes = {c.path: c for c in record.changes}
    assert changes["payload.display.fields"].value is None
    assert changes["payload.display.fields"].digest.startswith("sha256:")
    assert changes["payload.displayDigest"].value == "d" * 64
    assert b"Ada" not in audit.encode(record)
    assert audit.decode(audit.step(None, fact_of(event))[1]) == record

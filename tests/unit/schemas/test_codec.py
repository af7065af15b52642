"""Codec: round trips, headers, envelope-only decode, canonical body, and typed bad-input errors."""

from __future__ import annotations

import io
from datetime import UTC, datetime

import pytest
from fastavro import schemaless_writer

from runfacts.schemas import codec
from runfacts.schemas.catalog import default_catalog
from runfacts.schemas.codec import Codec, CodecSettings
from runfacts.schemas.commands import ReportToolFailed
from runfacts.schemas.common import Actor, CommandEnvelope, EventEnvelope
from runfacts.schemas.errors import ConfigError, InvalidInput, RecordPosition
from runfacts.schemas.events import ApprovalRequired, ApprovalRequiredPayload
from runfacts.schemas.spec.samples import sample

CATALOG = default_catalog()
CURRENT = sorted(CATALOG.current.values(), key=lambda e: e.fullname)
STRICT = Codec(CodecSettings(validate=True))
TRUSTED = Codec(CodecSettings(validate=False))
AT = RecordPosition("runfacts.run.events", 3, 42)


def approval_required(**changes: object) -> ApprovalRequired:
    now = datetime(2024, 5, 1, 12, 0, 0, 123000, tzinfo=UTC)
    payload = ApprovalRequiredPayload(
        approvalId="ap-1", toolCallId="tc-1", argsHash="sha256:ab", risk="high",
        requiredRole="finance_approver", expiresAt=now, summary="Refund 40 EUR to order-001")
    values: dict[str, object] = dict(
        eventId="ev-1", runId="run-1", turnId="turn-1", producer="run-decider",
        correlationId="corr-1", causationId="cmd-1", occurredAt=now, payload=payload)
    values.update(changes)
    return ApprovalRequired.model_validate(values)


@pytest.mark.parametrize("entry", CURRENT, ids=lambda e: e.type_name)
def test_decode_returns_equal_model_when_any_current_type_round_trips(entry) -> None:
    model = STRICT.decode(STRICT.encode_dict(sample(entry)))
    data = STRICT.encode(model)
    assert STRICT.decode(data) == model
    assert TRUSTED.decode(data) == model
    assert type(model).__name__ == entry.name


@pytest.mark.parametrize("entry", CURRENT, ids=lambda e: e.type_name)
def test_decode_envelope_matches_full_decode_when_reading_only_ids(entry) -> None:
    data = STRICT.encode_dict(sample(entry, seed=5))
    full = STRICT.decode(data)
    envelope = TRUSTED.decode_envelope(data)
    expected_type = EventEnvelope if entry.kind == "event" else CommandEnvelope
    assert type(envelope) is expected_type
    assert envelope.model_dump() == {k: v for k, v in full.model_dump().items() if k != "payload"}
    assert STRICT.decode_envelope(data) == envelope


def test_trusted_decode_gives_tuples_when_schema_has_arrays() -> None:
    data = STRICT.encode_dict(sample(CATALOG.by_type["run.needs_review"]))
    model = TRUSTED.decode(data)
    assert isinstance(model.payload.attemptedPath, tuple)
    assert model == STRICT.decode(data)


def test_encode_starts_with_single_object_marker_and_fingerprint_when_default_framing() -> None:
    data = codec.encode(approval_required())
    assert data[:2] == b"\xc3\x01"
    assert data[2:10] == CATALOG.by_type["approval.required"].fingerprint
    assert data[10:] == codec.canonical_body(approval_required())


def test_headers_carry_type_version_and_id_when_encoding_an_event() -> None:
    assert codec.headers(approval_required()) == [
        ("eventType", b"approval.required"), ("schemaVersion", b"2"), ("eventId", b"ev-1")]


def test_model_truncates_to_utc_millis_when_given_finer_or_local_time() -> None:
    local = datetime.fromisoformat("2024-05-01T14:00:00.123999+02:00")
    model = approval_required(occurredAt=local)
    assert model.occurredAt == datetime(2024, 5, 1, 12, 0, 0, 123000, tzinfo=UTC)
    assert codec.decode(codec.encode(model)) == model


def test_canonical_body_is_stable_when_equal_models_built_differently() -> None:
    one = approval_required()
    two = codec.decode(codec.encode(one))
    assert codec.canonical_body(one) == codec.canonical_body(two)
    assert codec.canonical_body(one) != codec.canonical_body(approval_required(eventId="ev-2"))


@pytest.mark.parametrize("cut", [0, 1, 5, 9, 10, 20, -1])
def test_decode_raises_invalid_input_when_bytes_are_truncated(cut: int) -> None:
    data = codec.encode(approval_required())
    with pytest.raises(InvalidInput) as err:
        codec.decode(data[:cut], AT)
    assert "runfacts.run.events[3]@42" in str(err.value)


def test_decode_names_schema_and_version_when_body_is_truncated() -> None:
    data = codec.encode(approval_required())
    with pytest.raises(InvalidInput) as err:
        codec.decode(data[:-4], AT)
    assert err.value.schema == "runfacts.events.ApprovalRequired"
    assert err.value.version == 2
    assert "cannot read body" in err.value.what


def test_decode_raises_invalid_input_when_fingerprint_is_unknown() -> None:
    data = bytearray(codec.encode(approval_required()))
    data[2:10] = b"\x01" * 8
    with pytest.raises(InvalidInput, match="unknown fingerprint 0101010101010101"):
        codec.decode(bytes(data), AT)


def test_decode_says_newer_version_when_headers_name_a_future_schema_version() -> None:
    data = bytearray(codec.encode(approval_required()))
    data[2:10] = b"\x02" * 8
    hint = [("eventType", b"approval.required"), ("schemaVersion", b"9")]
    with pytest.raises(InvalidInput, match="schemaVersion 9 is newer than this code knows") as err:
        codec.decode(bytes(data), AT, hint)
    assert err.value.schema == "runfacts.events.ApprovalRequired"
    assert err.value.version == 9


def test_decode_raises_invalid_input_when_trailing_bytes_follow_the_record() -> None:
    with pytest.raises(InvalidInput, match="2 trailing bytes"):
        codec.decode(codec.encode(approval_required()) + b"\x00\x00", AT)


def test_decode_raises_invalid_input_when_marker_is_missing() -> None:
    with pytest.raises(InvalidInput, match="not a runfacts record"):
        codec.decode(b"\x7b\x22json\x22: 1}", AT)


def test_decode_raises_invalid_input_when_value_fails_model_validation() -> None:
    values = sample(CATALOG.by_type["tool.call.report_failed"])
    values["payload"]["errorClass"] = "Not Snake Case"
    data = STRICT.encode_dict(values)
    with pytest.raises(InvalidInput, match="validation failed: payload.errorClass") as err:
        STRICT.decode(data, AT)
    assert err.value.schema == "runfacts.commands.ReportToolFailed"
    assert isinstance(TRUSTED.decode(data), ReportToolFailed)


def test_decode_raises_invalid_input_when_type_field_contradicts_the_schema() -> None:
    values = sample(CATALOG.by_type["approval.granted"])
    data = STRICT.encode_dict(values)
    values["eventType"] = "approval.rejected"
    forged = data[:10] + _body(values, "approval.granted")
    with pytest.raises(InvalidInput, match="does not match the writer schema"):
        STRICT.decode(forged, AT)


def test_encode_dict_raises_invalid_input_when_a_required_field_is_missing() -> None:
    values = sample(CATALOG.by_type["approval.granted"])
    del values["payload"]["argsHash"]
    with pytest.raises(InvalidInput, match="cannot encode") as err:
        codec.default_codec().encode_dict(values)
    assert err.value.schema == "runfacts.events.ApprovalGranted"


def test_encode_dict_raises_invalid_input_when_type_is_unknown() -> None:
    with pytest.raises(InvalidInput, match="no shipped schema for type 'nope'"):
        codec.default_codec().encode_dict({"eventType": "nope"})


def test_invalid_input_headers_name_position_schema_and_error_when_sent_to_dead_letters() -> None:
    with pytest.raises(InvalidInput) as err:
        codec.decode(codec.encode(approval_required())[:-1], AT)
    headers = dict(err.value.headers())
    assert headers["dlq.topic"] == b"runfacts.run.events"
    assert headers["dlq.offset"] == b"42"
    assert headers["dlq.schema"] == b"runfacts.events.ApprovalRequired"
    assert headers["dlq.schemaVersion"] == b"2"


def _body(values: dict[str, object], type_name: str) -> bytes:
    out = io.BytesIO()
    schemaless_writer(out, CATALOG.by_type[type_name].parsed, values)
    return out.getvalue()


def test_trusted_model_behaves_like_validated_when_hashed_copied_and_dumped() -> None:
    data = STRICT.encode_dict(sample(CATALOG.by_type["run.created"]))
    strict, trusted = STRICT.decode(data), TRUSTED.decode(data)
    assert hash(trusted) == hash(strict)
    assert trusted.model_dump() == strict.model_dump()
    assert trusted.model_fields_set == strict.model_fields_set
    assert trusted.model_copy(update={"runId": "other"}).runId == "other"
    assert repr(trusted) == repr(strict)


def test_trusted_models_share_one_fields_set_and_copies_never_change_it_when_every_field_is_given() -> None:
    from runfacts.schemas import construct
    data = STRICT.encode_dict(sample(CATALOG.by_type["run.created"]))
    first, second = TRUSTED.decode(data), TRUSTED.decode(data)
    everything = set(type(first).model_fields)
    assert first.model_fields_set is second.model_fields_set  # one set for the class, not one each
    assert first.model_fields_set == everything
    copied = first.model_copy(update={"runId": "other"})
    assert copied.model_fields_set is not first.model_fields_set
    assert first.model_fields_set == everything and copied.runId == "other"
    partial = construct.trusted(Actor, {"subjectId": "u"})  # not every field: a set of its own
    assert partial.model_fields_set == {"subjectId"}


def test_codec_raises_config_error_when_confluent_framing_has_no_registry() -> None:
    with pytest.raises(ConfigError, match="CodecSettings.confluent"):
        Codec(CodecSettings(confluent=True))

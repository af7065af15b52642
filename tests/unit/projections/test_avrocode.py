"""Generated Avro readers/writers agree with fastavro byte for byte, for every shipped schema."""

from __future__ import annotations

import io

import pytest
from fastavro import parse_schema, schemaless_reader, schemaless_writer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from projection_support import values_of

from runfacts.projections.eventlog import plain
from runfacts.schemas.binary.readers import AvroDecodeError, checked, compile_reader, read_long, write_long
from runfacts.schemas.binary.writers import compile_writer
from runfacts.schemas.catalog import default_catalog
from runfacts.schemas.spec.samples import sample as contract_sample

ENTRIES = sorted(default_catalog().entries, key=lambda e: (e.fullname, e.version))


def sample(entry, seed=1):
    """A contract sample with timestamps as epoch ms."""
    return plain(contract_sample(entry, seed))


PROPERTY = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _plain_schema(node):
    """The schema with logical types dropped (fastavro then returns ints like avrocode)."""
    if isinstance(node, dict):
        return {k: _plain_schema(v) for k, v in node.items() if k != "logicalType"}
    if isinstance(node, list):
        return [_plain_schema(x) for x in node]
    return node


def _fastavro_bytes(raw, value) -> bytes:
    out = io.BytesIO()
    schemaless_writer(out, parse_schema(_plain_schema(raw)), value)
    return out.getvalue()


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: f"{e.type_name}-v{e.version}")
def test_compiled_reader_and_writer_match_fastavro_when_given_samples_of_any_schema(entry) -> None:
    for seed in (1, 2, 3):
        body = _fastavro_bytes(entry.raw, sample(entry, seed))
        value, end = compile_reader(entry.raw)(body, 0)
        assert end == len(body)
        assert value == schemaless_reader(io.BytesIO(body), _plain_schema(entry.raw), None)
        assert compile_writer(entry.raw)(value) == body


@pytest.mark.parametrize("type_name", ["run.created", "tool.call.failed", "budget.debited",
                                       "reasoning.recorded", "approval.granted"])
def test_compiled_reader_and_writer_match_fastavro_when_values_are_random(type_name) -> None:
    entry = default_catalog().by_type[type_name]
    read, write = compile_reader(entry.raw), compile_writer(entry.raw)

    @PROPERTY
    @given(values_of(entry))
    def check(value) -> None:
        body = _fastavro_bytes(entry.raw, value)
        assert write(value) == body
        assert read(body, 0) == (value, len(body))

    check()


@given(st.integers(-2**63, 2**63 - 1))
def test_write_long_matches_fastavro_when_numbers_span_every_varint_size(number) -> None:
    out = io.BytesIO()
    schemaless_writer(out, "long", number)
    assert write_long(number) == out.getvalue()
    assert read_long(out.getvalue(), 0) == (number, len(out.getvalue()))


def test_reader_builds_only_kept_fields_when_a_selection_is_given() -> None:
    entry = default_catalog().by_type["tool.call.proposed"]
    body = _fastavro_bytes(entry.raw, sample(entry))
    keep = {"eventId": None, "runId": None, "payload": {"toolCallId": None, "risk": None}}
    value, end = compile_reader(entry.raw, keep)(body, 0)
    assert end == len(body)
    assert value == {"eventId": "eventid_1", "runId": "runid_3",
                     "payload": {"toolCallId": "toolcallid_12", "risk": "medium"}}


def test_checked_reader_raises_avro_decode_error_when_bytes_are_truncated_or_left_over() -> None:
    entry = default_catalog().by_type["approval.required"]
    body = _fastavro_bytes(entry.raw, sample(entry))
    read = checked(compile_reader(entry.raw), "approval.required v1")
    with pytest.raises(AvroDecodeError, match="approval.required v1"):
        read(body[:-5], 0)
    with pytest.raises(AvroDecodeError, match="1 bytes left"):
        read(body + b"\x00", 0)


def test_read_long_refuses_a_ten_byte_varint_that_overflows_64_bits() -> None:
    from runfacts.schemas.binary.varint import AvroDecodeError, read_long, write_long

    assert read_long(write_long(-(2**63)), 0)[0] == -(2**63)  # the longest legal varint: 10 bytes
    assert read_long(write_long(2**63 - 1), 0)[0] == 2**63 - 1
    with pytest.raises(AvroDecodeError, match="overflows 64 bits"):
        read_long(b"\xff" * 9 + b"\x7f", 0)  # hypothesis found it: the partial reader read 4.6e20

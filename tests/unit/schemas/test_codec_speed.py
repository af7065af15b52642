"""The codec's generated readers and writers (current versions) give fastavro's values and bytes."""

from __future__ import annotations

import io
from typing import Any

import pytest
from fastavro import schemaless_reader, schemaless_writer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from projection_support import values_of

from runfacts.schemas import construct
from runfacts.schemas.catalog import TYPE_FIELD, default_catalog
from runfacts.schemas.codec import SINGLE_OBJECT_MARKER, Codec, CodecSettings
from runfacts.schemas.errors import InvalidInput
from runfacts.schemas.spec.samples import sample

CATALOG = default_catalog()
CURRENT = sorted(CATALOG.current.values(), key=lambda e: e.fullname)
STRICT, TRUSTED = Codec(CodecSettings(validate=True)), Codec(CodecSettings(validate=False))
PROPERTY = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _plain(node: Any) -> Any:
    """The schema without logical types: fastavro then writes epoch-ms ints as given."""
    if isinstance(node, dict):
        return {k: _plain(v) for k, v in node.items() if k != "logicalType"}
    return [_plain(x) for x in node] if isinstance(node, list) else node


def _framed(entry: Any, body: bytes) -> bytes:
    return SINGLE_OBJECT_MARKER + entry.fingerprint + body


@pytest.mark.parametrize("entry", CURRENT, ids=lambda e: e.type_name)
def test_encode_writes_the_bytes_fastavro_writes_when_given_any_current_model(entry) -> None:
    for seed in (1, 2, 3, 4):
        model = STRICT.decode(STRICT.encode_dict(sample(entry, seed)))
        out = io.BytesIO()
        schemaless_writer(out, entry.parsed, construct.dump(model))
        assert STRICT.encode(model) == _framed(entry, out.getvalue())
        assert STRICT.body(model) == out.getvalue()


@pytest.mark.parametrize("type_name", ["run.created", "tool.call.failed", "approval.granted",
                                       "budget.debited", "run.resume", "tool.call.propose"])
def test_decode_dict_reads_what_fastavro_reads_when_values_are_random(type_name) -> None:
    entry = CATALOG.by_type[type_name]
    plain = _plain(entry.raw)

    @PROPERTY
    @given(values_of(entry))
    def check(value: dict[str, Any]) -> None:
        value = {**value, TYPE_FIELD[entry.kind]: entry.type_name}
        out = io.BytesIO()
        schemaless_writer(out, plain, value)
        expected = schemaless_reader(io.BytesIO(out.getvalue()), entry.parsed, None)
        assert TRUSTED.decode_dict(_framed(entry, out.getvalue())) == expected

    check()


def test_encode_raises_invalid_input_when_a_model_holds_a_value_of_the_wrong_type() -> None:
    entry = CATALOG.by_type["approval.required"]
    model = TRUSTED.decode(TRUSTED.encode_dict(sample(entry)))
    broken = construct.trusted(type(model), {**model.__dict__, "occurredAt": "yesterday"})
    with pytest.raises(InvalidInput, match="cannot encode"):
        TRUSTED.encode(broken)


_SAMPLES = [STRICT.encode_dict(sample(e, seed)) for e in CURRENT for seed in (1, 2)]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_decode_dict_reads_what_fastavro_reads_or_raises_invalid_input_when_bytes_are_mutated(
        data) -> None:
    value = bytearray(data.draw(st.sampled_from(_SAMPLES)))
    at = data.draw(st.integers(10, len(value) - 1))
    value[at:at + data.draw(st.integers(0, 2))] = data.draw(st.binary(max_size=2))
    entry = CATALOG.by_fingerprint[bytes(value[2:10])]
    stream = io.BytesIO(bytes(value[10:]))
    try:
        expected = schemaless_reader(stream, entry.parsed, None)
        readable = stream.tell() == len(value) - 10
    except Exception:  # noqa: BLE001 - fastavro refuses the bytes
        expected, readable = None, False
    try:
        got = TRUSTED.decode_dict(bytes(value))
    except InvalidInput:
        canonical = readable and _written(entry, expected) == bytes(value[10:])
        assert not canonical or (expected[TYPE_FIELD[entry.kind]], expected["schemaVersion"]) \
            != (entry.type_name, entry.version)
        return
    assert readable and got == expected


def _written(entry: Any, values: Any) -> bytes:
    out = io.BytesIO()
    schemaless_writer(out, entry.parsed, values)
    return out.getvalue()

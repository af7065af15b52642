"""The decider's compiled codec reads and writes exactly what the contract codec does.

Events: the same framed bytes and headers for every current event type (samples with every
optional field set and with none set, and random values). Commands: the same model — or the
same InvalidInput message — for every current command type, for random values, for mutated
bytes, and for the golden files of every shipped version (older ones are upcast).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from projection_support import values_of

from runfacts.processors.decider.app import InputLimits
from runfacts.processors.decider.codec import DeciderCodec
from runfacts.schemas.catalog import default_catalog
from runfacts.schemas.codec import Codec, CodecSettings
from runfacts.schemas.errors import InvalidInput
from runfacts.schemas.spec.golden import golden_paths
from runfacts.schemas.spec.samples import sample

CATALOG = default_catalog()
CURRENT = sorted(CATALOG.current.values(), key=lambda e: e.fullname)
EVENTS = [e for e in CURRENT if e.kind == "event"]
COMMANDS = [e for e in CURRENT if e.kind == "command"]
ALL_VERSIONS = sorted(CATALOG.entries, key=lambda e: (e.fullname, e.version))
GOLDEN = Path(__file__).parent / "golden"
CODEC = Codec(CodecSettings(validate=True))
FAST = DeciderCodec(CODEC)
SCALE = int(os.environ.get("RUNFACTS_FUZZ_SCALE", "1"))  # `make fuzz`: 10
PROPERTY = settings(max_examples=20 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _without_optionals(values: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    """`values` with every nullable field of the record (and its sub-records) set to None."""
    out = dict(values)
    for f in node["fields"]:
        kind = f["type"]
        if isinstance(kind, list) and "null" in kind:
            out[f["name"]] = None
        elif isinstance(kind, dict) and kind.get("type") == "record":
            out[f["name"]] = _without_optionals(values[f["name"]], kind)
    return out


def _outcome(decode: Any, data: bytes) -> tuple[str, Any]:
    try:
        return "ok", decode(data)
    except InvalidInput as exc:
        return "invalid", str(exc)


def _model(data: bytes) -> Any:
    try:
        return CODEC.decode(data)
    except InvalidInput:
        return None  # random values the model's own rules reject (patterns): not an event


@pytest.mark.parametrize("entry", EVENTS, ids=lambda e: e.type_name)
def test_event_bytes_equal_the_codecs_when_samples_have_all_or_no_optional_fields(entry) -> None:
    for seed in range(4):
        for values in (sample(entry, seed), _without_optionals(sample(entry, seed), entry.raw)):
            model = CODEC.decode(CODEC.encode_dict(values))
            assert FAST.encode(model) == CODEC.encode(model)
            assert FAST.headers(model) == CODEC.headers(model)


@pytest.mark.parametrize("entry", EVENTS, ids=lambda e: e.type_name)
def test_event_bytes_equal_the_codecs_when_values_are_random(entry) -> None:
    @PROPERTY
    @given(values_of(entry))
    def check(values: dict[str, Any]) -> None:
        model = _model(CODEC.encode_dict(values))
        if model is not None:
            assert FAST.encode(model) == CODEC.encode(model)

    check()


def _command_values(entry: Any) -> st.SearchStrategy[dict[str, Any]]:
    return values_of(entry).map(lambda v: {**v, "commandType": entry.type_name})


@pytest.mark.parametrize("entry", COMMANDS, ids=lambda e: e.type_name)
def test_command_decodes_like_the_codec_when_values_are_random(entry) -> None:
    @PROPERTY
    @given(_command_values(entry))
    def check(values: dict[str, Any]) -> None:
        data = CODEC.encode_dict(values)
        assert _outcome(FAST.decode, data) == _outcome(CODEC.decode, data)

    check()


@pytest.mark.parametrize("entry", COMMANDS, ids=lambda e: e.type_name)
def test_command_decodes_like_the_codec_when_bytes_are_mutated(entry) -> None:
    data = CODEC.encode_dict(sample(entry, 3))

    @PROPERTY
    @given(st.integers(0, len(data) - 1), st.integers(0, 255), st.integers(0, len(data)),
           st.binary(max_size=3))
    def check(at: int, byte: int, cut: int, extra: bytes) -> None:
        for bad in (data[:at] + bytes([byte]) + data[at + 1:], data[:cut], data + extra):
            assert _outcome(FAST.decode, bad) == _outcome(CODEC.decode, bad)

    check()


@pytest.mark.parametrize("entry", ALL_VERSIONS, ids=lambda e: f"{e.type_name}.v{e.version}")
def test_golden_bytes_decode_like_the_codec_when_written_by_any_version(entry) -> None:
    data = golden_paths(GOLDEN, entry)[0].read_bytes()
    assert _outcome(FAST.decode, data) == _outcome(CODEC.decode, data)


def test_command_datetimes_are_fastavros_when_decoded() -> None:
    entry = COMMANDS[0]
    data = CODEC.encode_dict(sample(entry, 2))
    fast, slow = FAST.decode(data), CODEC.decode(data)
    assert fast.issuedAt == slow.issuedAt and fast.issuedAt.tzinfo is slow.issuedAt.tzinfo


@pytest.mark.parametrize("entry", COMMANDS, ids=lambda e: e.type_name)
def test_extent_leaves_no_text_or_array_unchecked_when_commands_are_random(entry) -> None:
    limits = InputLimits(max_record_bytes=1 << 20, max_text_chars=6, max_items=1)

    @PROPERTY
    @given(_command_values(entry))
    def check(values: dict[str, Any]) -> None:
        try:
            model, extent = FAST.decode_sized(CODEC.encode_dict(values))
        except InvalidInput:
            return
        if limits.within(extent):
            assert limits.check(model) is None

    check()


def test_unknown_fingerprints_are_not_remembered_when_records_name_them() -> None:
    fast = DeciderCodec(CODEC)
    data = CODEC.encode_dict(sample(COMMANDS[0], 1))
    for i in range(50):
        forged = data[:2] + i.to_bytes(8, "little") + data[10:]
        assert _outcome(fast.decode, forged) == _outcome(CODEC.decode, forged)
    assert len(fast._readers) <= 1

"""Random and mutated bytes give InvalidInput or a valid model, never another exception."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runfacts.schemas.catalog import default_catalog
from runfacts.schemas.codec import Codec, CodecSettings
from runfacts.schemas.errors import InvalidInput, RecordPosition
from runfacts.schemas.spec.samples import sample

CATALOG = default_catalog()
ENTRIES = sorted(CATALOG.entries, key=lambda e: (e.fullname, e.version))
CODECS = (Codec(CodecSettings(validate=True)), Codec(CodecSettings(validate=False)))
ENCODED = [CODECS[0].encode_dict(sample(e, seed=i), e.version) for i, e in enumerate(ENTRIES)]
AT = RecordPosition("fuzz", 0, 7)
FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def decoders() -> list[Callable[[bytes], object]]:
    out: list[Callable[[bytes], object]] = []
    for codec in CODECS:
        out += [lambda d, c=codec: c.decode(d, AT), lambda d, c=codec: c.decode_dict(d, AT),
                lambda d, c=codec: c.decode_envelope(d, AT)]
    return out


def outcome(data: bytes) -> list[str]:
    """'ok' or 'invalid' per decoder; any other exception propagates and fails the test."""
    results = []
    for decode in decoders():
        try:
            decode(data)
            results.append("ok")
        except InvalidInput as exc:
            assert str(AT) in str(exc)
            results.append("invalid")
    return results


@FUZZ
@given(st.binary(max_size=400))
def test_decode_raises_only_invalid_input_when_bytes_are_random(data: bytes) -> None:
    assert set(outcome(data)) <= {"ok", "invalid"}


@FUZZ
@given(st.sampled_from(ENTRIES), st.binary(max_size=300))
def test_decode_raises_only_invalid_input_when_random_body_follows_a_known_fingerprint(
        entry, body: bytes) -> None:
    assert set(outcome(b"\xc3\x01" + entry.fingerprint + body)) <= {"ok", "invalid"}


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(st.sampled_from(ENCODED)))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        kind = draw(st.sampled_from(["flip", "set", "cut", "insert", "delete"]))
        if kind == "flip" and data:
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set" and data:
            data[at] = draw(st.integers(0, 255))
        elif kind == "cut":
            del data[at:]
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        else:
            del data[at:at + draw(st.integers(1, 8))]
    return bytes(data)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_decode_raises_only_invalid_input_when_valid_bytes_are_mutated(data: bytes) -> None:
    assert set(outcome(data)) <= {"ok", "invalid"}


def test_full_decode_raises_invalid_input_when_cut_anywhere() -> None:
    data = ENCODED[0]
    for n in range(len(data)):
        full_decoders = [r for i, r in enumerate(outcome(data[:n])) if i % 3 != 2]
        assert full_decoders == ["invalid"] * 4, n
    assert outcome(data) == ["ok"] * 6

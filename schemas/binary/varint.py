"""Avro's zig-zag varints and length-prefixed strings: the primitives the generated readers
and writers (`avrocode`, `avrowriter`) and the audit's hand-built records use.

Reading is unrolled for the lengths the contract holds (up to epoch-ms timestamps); writing
goes through tables of the encodings of 14-bit groups. Pure.
"""

from __future__ import annotations

import re

CACHED = 1 << 14
_VARINT = re.compile(rb"[\x80-\xff]{0,9}[\x00-\x7f]", re.DOTALL).match
ZIGZAG = tuple((b >> 1) ^ -(b & 1) for b in range(128))
"""The value of a one-byte varint, by that byte."""
SHORT = tuple((b >> 1) + 1 if b < 0x80 and not b & 1 else 0 for b in range(256))
"""Per first byte of a length: 1 + the length when it fits that byte (0 <= n < 64), else 0."""


class AvroDecodeError(ValueError):
    """Bytes that do not decode under the schema (truncated, bad length, bad index)."""


def read_long(buf: bytes, pos: int) -> tuple[int, int]:
    """A zig-zag varint at `pos`: (value, position after it). Unrolled to seven bytes, which
    covers epoch-millisecond timestamps, the longest values the contract holds."""
    b = buf[pos]
    n = b & 0x7F
    if b < 0x80:
        return (n >> 1) ^ -(n & 1), pos + 1
    b = buf[pos + 1]
    n |= (b & 0x7F) << 7
    if b < 0x80:
        return (n >> 1) ^ -(n & 1), pos + 2
    b = buf[pos + 2]
    n |= (b & 0x7F) << 14
    if b < 0x80:
        return (n >> 1) ^ -(n & 1), pos + 3
    b = buf[pos + 3]
    n |= (b & 0x7F) << 21
    if b < 0x80:
        return (n >> 1) ^ -(n & 1), pos + 4
    b = buf[pos + 4]
    n |= (b & 0x7F) << 28
    if b < 0x80:
        return (n >> 1) ^ -(n & 1), pos + 5
    b = buf[pos + 5]
    n |= (b & 0x7F) << 35
    if b < 0x80:
        return (n >> 1) ^ -(n & 1), pos + 6
    b = buf[pos + 6]
    n |= (b & 0x7F) << 42
    if b < 0x80:
        return (n >> 1) ^ -(n & 1), pos + 7
    return _read_long_tail(buf, pos + 7, n)


def _read_long_tail(buf: bytes, pos: int, n: int) -> tuple[int, int]:
    """The rest of a varint whose first seven bytes (`n`) had the continuation bit set."""
    shift = 49
    while True:
        b = buf[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        if b < 0x80:
            if n >> 64:  # a tenth byte may carry only bit 63: an Avro long is 64 bits
                raise AvroDecodeError(f"varint overflows 64 bits at {pos - 1}")
            return (n >> 1) ^ -(n & 1), pos
        shift += 7
        if shift > 63:
            raise AvroDecodeError(f"varint longer than 10 bytes at {pos}")


def skip_long(buf: bytes, pos: int) -> int:
    """The position after the varint at `pos` (AvroDecodeError: none, or over 10 bytes)."""
    found = _VARINT(buf, pos)
    if found is None:
        raise AvroDecodeError(f"truncated or overlong varint at {pos}")
    return found.end()


def write_long(n: int) -> bytes:
    """The zig-zag varint encoding of `n`."""
    if 0 <= n < CACHED:
        return VARINTS[n]
    return encode_long(n)


def _unsigned(z: int) -> bytes:
    """The varint bytes of a non-negative number (the slow, general way)."""
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


_UNSIGNED = [_unsigned(z) for z in range(CACHED)]
_LOW14 = [bytes(((z & 0x7F) | 0x80, (z >> 7) | 0x80)) for z in range(CACHED)]
"""The first two bytes of every varint over 14 bits, by those bits."""


def encode_long(n: int) -> bytes:
    """The zig-zag varint of any long, 14 bits per table look-up."""
    z = (n << 1) ^ (n >> 63)
    if z < 1 << 14:
        return _UNSIGNED[z]
    if z < 1 << 28:
        return _LOW14[z & 0x3FFF] + _UNSIGNED[z >> 14]
    if z < 1 << 42:
        return _LOW14[z & 0x3FFF] + _LOW14[(z >> 14) & 0x3FFF] + _UNSIGNED[z >> 28]
    return _unsigned(z)


VARINTS = [encode_long(n) for n in range(CACHED)]


def write_string(text: str) -> bytes:
    """A length-prefixed UTF-8 string."""
    data = text.encode()
    return write_long(len(data)) + data

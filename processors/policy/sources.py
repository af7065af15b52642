"""Commands signed by their source: HMAC-SHA256 over the exact record bytes, checked by the decider.

`authSource` on a command is what its writer claims. A writer of the commands topic that holds
only its own key cannot claim another source: each trusted source (agent harness, outbox
service, CLI, dashboard, dispatcher, timer) signs the records it writes with its key, and the
run decider verifies the signature against the key of the source the command claims.

What is signed: the record value, i.e. the command's Avro single-object bytes exactly as
written (marker, schema fingerprint and the whole body: commandId, runId, commandType, schema
version, actor with its subjectId, roles, tenant and authSource, issuedAt, expectedVersion,
correlation and causation ids, payload). Nothing the decider acts on lies outside them (the
record key must equal the body's runId, the shell checks it). The MAC binds version, source and
key id too:

    HMAC-SHA256(key[kid], "runfacts.command.v1" NUL authSource NUL kid NUL value)

It travels in two record headers, `sourceKeyId` (the key id) and `sourceSignature` (base64url,
no padding, 43 characters); the schema does not change and older unsigned records stay readable.
Outbox rows store value and headers as written, so a later edit of a row no longer verifies.

Keys: one keyring per source, in the approval keyring's format and with its rotation rules
(`current`, a grace period with optional `verifyUntilMs`, `retired` ids):

    {"cli": {"current": "cli-2026-12", "keys": {"cli-2026-12": "<base64 32+ bytes>"}},
     "dispatcher": {"current": "dsp-2026-12", "keys": {...}, "retired": ["dsp-2026-06"]}}

The decider holds every source's verification keys; each signer only its own source's.

Pure: no clock (`now_ms` comes in: the broker's receive time), no environment; loading keys
is `runfacts.processors.policy.keyring.load_source_keys_if_configured`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from runfacts.processors.policy.approvals import KID_PATTERN, Keyring, keyring_from
from runfacts.schemas.errors import ConfigError

KEY_ID_HEADER = "sourceKeyId"
SIGNATURE_HEADER = "sourceSignature"
MAC_CONTEXT = b"runfacts.command.v1\x00"
SIGNATURE_CHARS = 43  # base64url of a 32-byte HMAC-SHA256, without padding
SIGNATURE_PATTERN = re.compile(rb"[A-Za-z0-9_-]{43}")

SourceDenial = Literal[
    "source_signature_missing",
    "source_signature_invalid",
    "source_key_unknown",
    "source_key_retired",
]
SOURCE_DENIALS: tuple[SourceDenial, ...] = (
    "source_signature_missing", "source_signature_invalid", "source_key_unknown", "source_key_retired")

Headers = Iterable[tuple[str, bytes | None]] | None


@dataclass(frozen=True)
class SourceKeys:
    """Keyrings by auth source (the `authSource` a command's actor claims)."""

    keyrings: Mapping[str, Keyring]
    _pads: Mapping[tuple[str, str], tuple[Any, Any]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for source in self.keyrings:
            if not source.strip():
                raise ConfigError("source keys", source, "an auth source name must not be empty")
        object.__setattr__(self, "keyrings", MappingProxyType(dict(self.keyrings)))
        object.__setattr__(self, "_pads", {(source, kid): _hmac_pads(key.secret)
                                           for source, ring in self.keyrings.items()
                                           for kid, key in ring.keys.items()})

    def mac(self, auth_source: str, kid: str, value: bytes) -> bytes:
        """HMAC-SHA256 under key `kid` of `auth_source` (which must hold it) over the signed bytes."""
        inner, outer = self._pads[(auth_source, kid)]
        h = inner.copy()
        h.update(MAC_CONTEXT)
        h.update(auth_source.encode("utf-8"))
        h.update(b"\x00")
        h.update(kid.encode("ascii"))
        h.update(b"\x00")
        h.update(value)
        o = outer.copy()
        o.update(h.digest())
        return o.digest()  # type: ignore[no-any-return]

    def __repr__(self) -> str:  # the keyrings' reprs hide secrets; show only what is there
        return f"SourceKeys(sources={sorted(self.keyrings)})"


@dataclass(frozen=True)
class SourceCheck:
    """Why a command's signature was refused, in words for the dead letter (never a secret)."""

    reason: SourceDenial
    detail: str

    def __str__(self) -> str:
        return f"{self.reason}: {self.detail}"


def parse_source_keys(text: str, source: str = "<source keys>") -> SourceKeys:
    """SourceKeys from JSON `{authSource: keyring}` (each keyring as `approvals.parse_keyring`).

    Error messages name the setting and the source, never a secret.
    """
    try:
        data = json.loads(text)
    except ValueError:
        raise ConfigError(source, "<hidden>", "not valid JSON") from None
    if not isinstance(data, dict) or not data:
        raise ConfigError(source, "<hidden>", 'expected an object of keyrings by auth source, e.g. '
                                              '{"cli": {"current": "cli-1", "keys": {"cli-1": "<base64>"}}}')
    return SourceKeys({name: keyring_from(entry, f"{source}:{name}") for name, entry in data.items()})


def sign(keys: SourceKeys, auth_source: str, value: bytes) -> list[tuple[str, bytes]]:
    """The two signature headers for a record `value` written for `auth_source`.

    A ConfigError, naming the source, when this process holds no current key for it.
    """
    keyring = require_signing_key(keys, auth_source)
    kid = keyring.current
    assert kid is not None  # require_signing_key checked it
    return [(KEY_ID_HEADER, kid.encode("ascii")), (SIGNATURE_HEADER, _b64encode(keys.mac(auth_source, kid, value)))]


def require_signing_key(keys: SourceKeys, auth_source: str) -> Keyring:
    """The keyring `auth_source` signs with; a ConfigError naming the source when it has no
    current key here (a signer calls this at start, so a missing key fails before any send)."""
    keyring = keys.keyrings.get(auth_source)
    if keyring is None or keyring.current is None:
        held = ", ".join(sorted(keys.keyrings)) or "none"
        raise ConfigError("source signing key", auth_source,
                          f"no current key for this auth source (this process holds keys for: {held}); add "
                          f"one under {auth_source!r} to RUNFACTS_SOURCE_KEYS[_FILE]")
    return keyring


def check_source(keys: SourceKeys, auth_source: str, value: bytes, headers: Headers,
                 now_ms: int) -> SourceCheck | None:
    """None when `value` carries a valid signature by a key of `auth_source`; else why not.

    Checked in this order: missing (neither header), invalid (a malformed, partial or
    repeated header), retired (listed, or past its `verifyUntilMs` at `now_ms`), unknown (no
    such key for this source), invalid (the MAC does not match, compared in constant time).
    """
    found = _seal(headers)
    if found is None:
        return SourceCheck("source_signature_missing", f"command claims {auth_source!r} and carries no signature")
    if isinstance(found, str):
        return SourceCheck("source_signature_invalid", found)
    kid, signature = found
    keyring = keys.keyrings.get(auth_source)
    key = keyring.keys.get(kid) if keyring is not None else None
    if keyring is not None and (kid in keyring.retired or (
            key is not None and key.verify_until_ms is not None and now_ms >= key.verify_until_ms)):
        return SourceCheck("source_key_retired", f"key {kid} of {auth_source!r} is retired")
    if key is None:
        return SourceCheck("source_key_unknown", f"no key {kid} for auth source {auth_source!r}")
    if not hmac.compare_digest(_b64encode(keys.mac(auth_source, kid, value)), signature):
        return SourceCheck("source_signature_invalid",
                           f"signature by key {kid} of {auth_source!r} does not match the record's bytes")
    return None


def _seal(headers: Headers) -> tuple[str, bytes] | str | None:
    """(kid, signature as sent: base64url); a string saying what is malformed; None when neither is there."""
    kids: list[bytes | None] = []
    sigs: list[bytes | None] = []
    for name, value in headers or ():
        if name == KEY_ID_HEADER:
            kids.append(value)
        elif name == SIGNATURE_HEADER:
            sigs.append(value)
    if not kids and not sigs:
        return None
    if len(kids) != 1 or len(sigs) != 1:
        return f"expected one {KEY_ID_HEADER} and one {SIGNATURE_HEADER} header, got {len(kids)} and {len(sigs)}"
    kid, signature = _ascii(kids[0]), sigs[0]
    if kid is None or not KID_PATTERN.match(kid):
        return f"{KEY_ID_HEADER} is not a key id ({KID_PATTERN.pattern})"
    if not isinstance(signature, bytes) or not SIGNATURE_PATTERN.fullmatch(signature):
        return f"{SIGNATURE_HEADER} is not a base64url HMAC-SHA256 ({SIGNATURE_CHARS} characters)"
    return kid, signature


def _ascii(value: bytes | None) -> str | None:
    if value is None:
        return None
    try:
        return value.decode("ascii")
    except UnicodeDecodeError:
        return None


def _hmac_pads(secret: bytes) -> tuple[Any, Any]:
    """HMAC-SHA256's keyed inner and outer hash states (RFC 2104), computed once per key: each
    MAC then costs two copies and two SHA-256 updates, a third of `hmac.digest` on OpenSSL 3
    (which sets up its MAC context per call). Equal to `hmac` (tests/unit/policy/test_source_signatures.py)."""
    block = hashlib.sha256().block_size
    key = hashlib.sha256(secret).digest() if len(secret) > block else secret
    key = key.ljust(block, b"\x00")
    return (hashlib.sha256(bytes(b ^ 0x36 for b in key)), hashlib.sha256(bytes(b ^ 0x5C for b in key)))


def _b64encode(data: bytes) -> bytes:
    return base64.urlsafe_b64encode(data).rstrip(b"=")

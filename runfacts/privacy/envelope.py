"""Envelope encryption of personal fields, pure: seal, pseudonymise, wrap data keys, and THE `reveal`.

A personal string (`"pii": true`) is replaced at its source by one of two forms, inside the
same Avro string (no schema change; a string without a prefix is an older plain record):
- free text: `rfe1.<ref>.<dek>.<origin>.<sealed>`: AES-256-GCM under data key `dek` of the
  data subject `ref`; `sealed` = base64url(nonce(12) + ciphertext + tag); associated data
  `runfacts.pii.v1 NUL ref NUL dek NUL origin NUL field` binds it to the record that first
  carried it (`origin`, base64url of its command id) and to its field (the name, e.g.
  `goalSummary`: the decider's copies into events and state keep it, a move elsewhere fails);
- identities (userId, subjectId): `rfp1.<ref>`, a keyed pseudonym (HMAC-SHA256 under the
  pseudonym key, 130 bits in base32). Equal subjects give equal pseudonyms, so the decider's
  comparisons (self-approval, ownership) need no decryption; the name itself is sealed in
  the subject's key record, so erasing the key erases the name.
Data keys (32 random bytes) are wrapped by the current key-encryption key (KEK) with
AES-256-GCM, associated data `runfacts.dek.v1 NUL ref NUL dek NUL kek`.

`reveal(value, field, view)` is the one function every reader uses: the plain value, or
`[erased]` (the subject's key is gone), `[encrypted]` (this reader holds no keys) or
`[unreadable]` (garbled, or moved to another field): it never raises. Nonces and keys come
in as arguments; nothing here reads the clock, the environment or randomness.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from runfacts.schemas.errors import ConfigError

SEALED_PREFIX = "rfe1."
PSEUDONYM_PREFIX = "rfp1."
ERASED = "[erased]"
ENCRYPTED = "[encrypted]"
UNREADABLE = "[unreadable]"
MARKERS = (ERASED, ENCRYPTED, UNREADABLE)
KEY_BYTES = 32
NONCE_BYTES = 12
REF_PATTERN = re.compile(r"[a-z2-7]{26}")
DEK_PATTERN = re.compile(r"[0-9a-f]{16}")
KID_PATTERN = re.compile(r"[A-Za-z0-9._-]{1,64}")
_FIELD_AD = b"runfacts.pii.v1\x00"
_WRAP_AD = b"runfacts.dek.v1\x00"
_NAME_PATH = "subject"


@dataclass(frozen=True)
class PrivacyKeys:
    """Key-encryption keys by id (`current` wraps new data keys) and the pseudonym key."""

    keks: Mapping[str, bytes] = field(repr=False)
    current: str
    pseudonym_key: bytes = field(repr=False)

    def __post_init__(self) -> None:
        for kid, secret in self.keks.items():
            if not KID_PATTERN.fullmatch(kid):
                raise ConfigError("privacy key id", kid, f"must match {KID_PATTERN.pattern}")
            if len(secret) != KEY_BYTES:
                raise ConfigError(f"privacy key {kid}", "<secret>", f"must be {KEY_BYTES} bytes (AES-256)")
        if self.current not in self.keks:
            raise ConfigError("privacy keys current", self.current, "no such key")
        if len(self.pseudonym_key) < KEY_BYTES:
            raise ConfigError("privacy pseudonymKey", "<secret>", f"shorter than {KEY_BYTES} bytes")
        object.__setattr__(self, "keks", MappingProxyType(dict(self.keks)))

    def __repr__(self) -> str:
        return f"PrivacyKeys(current={self.current!r}, keks={sorted(self.keks)})"


@dataclass(frozen=True)
class DataKeyRecord:
    """One data key of one subject as the keys topic holds it (wrapped; the name sealed)."""

    ref: str
    dek: str
    kek: str
    wrapped: bytes
    name: str | None = None

    @property
    def key(self) -> bytes:
        """The record key in the keys topic: `<ref>/<dek>` (compaction keeps each data key)."""
        return f"{self.ref}/{self.dek}".encode("ascii")


@dataclass(frozen=True)
class KeyView:
    """What a reader holds: unwrapped data keys by (ref, dek) and subjects' names by ref."""

    secrets: Mapping[tuple[str, str], bytes] = field(default_factory=dict, repr=False)
    names: Mapping[str, str] = field(default_factory=dict, repr=False)
    configured: bool = True

    def __repr__(self) -> str:
        return f"KeyView(keys={len(self.secrets)}, configured={self.configured})"


NO_KEYS = KeyView(configured=False)


def b64(data: bytes) -> str:
    """base64url without padding."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def unb64(text: str) -> bytes | None:
    """The inverse of `b64`; None for anything that is not base64url."""
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        return None


def subject_ref(subject: str, keys: PrivacyKeys) -> str:
    """The subject's reference: HMAC-SHA256(pseudonym key, subject), 130 bits in base32."""
    mac = hmac.new(keys.pseudonym_key, b"runfacts.subject.v1\x00" + subject.encode("utf-8"), hashlib.sha256)
    return base64.b32encode(mac.digest()).decode("ascii")[:26].lower()


def pseudonym(subject: str, keys: PrivacyKeys) -> str:
    """`rfp1.<ref>`: what an identity field holds instead of the subject's id."""
    return PSEUDONYM_PREFIX + subject_ref(subject, keys)


def is_protected(value: object) -> bool:
    """A sealed or pseudonymised value (never sealed twice)."""
    return isinstance(value, str) and value.startswith((SEALED_PREFIX, PSEUDONYM_PREFIX))


def ref_of(value: str) -> str | None:
    """The subject reference a protected value names, or None."""
    if value.startswith(PSEUDONYM_PREFIX):
        ref = value[len(PSEUDONYM_PREFIX):]
    elif value.startswith(SEALED_PREFIX):
        ref = value[len(SEALED_PREFIX):].split(".", 1)[0]
    else:
        return None
    return ref if REF_PATTERN.fullmatch(ref) else None


def _field_ad(ref: str, dek: str, origin: str, path: str) -> bytes:
    return b"\x00".join([_FIELD_AD + ref.encode(), dek.encode(), origin.encode(), path.encode("utf-8")])


def seal(text: str, ref: str, dek: str, secret: bytes, origin: str, path: str, nonce: bytes) -> str:
    """`text` sealed under data key (ref, dek), bound to `origin` (a record id) and `path`."""
    origin64 = b64(origin.encode("utf-8"))
    body = AESGCM(secret).encrypt(nonce, text.encode("utf-8"), _field_ad(ref, dek, origin64, path))
    return f"{SEALED_PREFIX}{ref}.{dek}.{origin64}.{b64(nonce + body)}"


def open_sealed(token: str, path: str, view: KeyView) -> str:
    """The plain text of a sealed token, or a marker (never raises)."""
    parts = token[len(SEALED_PREFIX):].split(".")
    if len(parts) != 4 or not REF_PATTERN.fullmatch(parts[0]) or not DEK_PATTERN.fullmatch(parts[1]):
        return UNREADABLE
    if not view.configured:
        return ENCRYPTED
    secret = view.secrets.get((parts[0], parts[1]))
    if secret is None:
        return ERASED
    plain = _decrypt(parts, path, secret)
    return UNREADABLE if plain is None else plain


def _decrypt(parts: list[str], path: str, secret: bytes) -> str | None:
    ref, dek, origin64, blob64 = parts
    blob = unb64(blob64)
    if blob is None or len(blob) < NONCE_BYTES + 16:
        return None
    try:
        plain = AESGCM(secret).decrypt(blob[:NONCE_BYTES], blob[NONCE_BYTES:], _field_ad(ref, dek, origin64, path))
        return plain.decode("utf-8")
    except (InvalidTag, UnicodeDecodeError):
        return None


def reveal(value: Any, path: str, view: KeyView) -> Any:
    """THE reader's function: the plain value of a personal field, or a marker; never raises.

    Plain (older or unencrypted) values come back as they are; None stays None.
    """
    if not isinstance(value, str):
        return value
    if value.startswith(SEALED_PREFIX):
        return open_sealed(value, path, view)
    if value.startswith(PSEUDONYM_PREFIX):
        ref = ref_of(value)
        if ref is None:
            return UNREADABLE
        if not view.configured:
            return ENCRYPTED
        return view.names.get(ref, ERASED)
    return value


def wrap(keys: PrivacyKeys, ref: str, dek: str, secret: bytes, nonce: bytes, name: str | None,
         name_nonce: bytes) -> DataKeyRecord:
    """A data key wrapped under the current KEK, with the subject's name sealed under it."""
    kek = keys.current
    wrapped = nonce + AESGCM(keys.keks[kek]).encrypt(nonce, secret, _wrap_ad(ref, dek, kek))
    sealed_name = None if name is None else seal(name, ref, dek, secret, ref, _NAME_PATH, name_nonce)
    return DataKeyRecord(ref, dek, kek, wrapped, sealed_name)


def _wrap_ad(ref: str, dek: str, kek: str) -> bytes:
    return b"\x00".join([_WRAP_AD + ref.encode(), dek.encode(), kek.encode()])


def unwrap(keys: PrivacyKeys, record: DataKeyRecord) -> bytes | None:
    """The data key of `record`, or None (its KEK is not configured, or the bytes do not verify)."""
    kek = keys.keks.get(record.kek)
    if kek is None or len(record.wrapped) < NONCE_BYTES + 16:
        return None
    try:
        return AESGCM(kek).decrypt(record.wrapped[:NONCE_BYTES], record.wrapped[NONCE_BYTES:],
                                   _wrap_ad(record.ref, record.dek, record.kek))
    except InvalidTag:
        return None


def view_of(keys: PrivacyKeys, records: Mapping[bytes, DataKeyRecord]) -> KeyView:
    """The reader's view of the live key records (erased ones are simply absent)."""
    secrets: dict[tuple[str, str], bytes] = {}
    names: dict[str, str] = {}
    for record in records.values():
        secret = unwrap(keys, record)
        if secret is None:
            continue
        secrets[(record.ref, record.dek)] = secret
        parts = None if record.name is None else record.name[len(SEALED_PREFIX):].split(".")
        name = None if parts is None or len(parts) != 4 else _decrypt(parts, _NAME_PATH, secret)
        if name is not None:
            names[record.ref] = name
    return KeyView(secrets, names)


def encode_record(record: DataKeyRecord) -> bytes:
    """The keys topic's value: canonical JSON (no secret in clear)."""
    return json.dumps({"v": 1, "ref": record.ref, "dek": record.dek, "kek": record.kek,
                       "wrapped": b64(record.wrapped), "name": record.name},
                      sort_keys=True, separators=(",", ":")).encode("utf-8")


def decode_record(value: bytes) -> DataKeyRecord | None:
    """A key record from the keys topic, or None for a value this version cannot read."""
    try:
        data = json.loads(value)
        wrapped = unb64(data["wrapped"])
        if data.get("v") != 1 or wrapped is None or not REF_PATTERN.fullmatch(data["ref"]):
            return None
        return DataKeyRecord(data["ref"], data["dek"], data["kek"], wrapped, data.get("name"))
    except (ValueError, KeyError, TypeError):
        return None

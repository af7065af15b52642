"""Signed approvals: HMAC-SHA256 tokens the authenticating service issues and the decider verifies.

A writer to the commands topic can put any `actor` on a `run.resume`; it cannot forge the
token, because only the service that authenticated the human holds the signing key.

Token: `v2.<kid>.<payload>.<sig>`; payload is base64url (no padding) of canonical JSON
claims `{approvalId, argsHash, decision, displayDigest, expiresAtMs, runId, subjectId}`; sig
is base64url of HMAC-SHA256(key[kid], "runfacts.approval." + "v2.<kid>.<payload>"). The key id
and version are inside the MAC, so a token cannot be moved to another key. `displayDigest` is
the digest of the argument display the approver was shown (null: the approval has none), so
the signed token proves what the approver saw (docs/security.md).

v1 tokens (claims without `displayDigest`) still verify, as binding no display: they pass only
for an approval that has none (proposed without a display); for any other the decider answers
`token_claims_mismatch`. Issuers write v2 only.

Rotation: a keyring holds verification keys by id, the id new tokens are issued with
(`current`), and retired ids. Rotate by adding a new key as current, keeping the old one
for a grace period (optionally until `verifyUntilMs`), then listing its id as retired:
tokens under a retired id are rejected as `token_retired_key`.

Pure: no clock (now_ms comes in), no environment; loading keys is `approval_keys.load_keyring`.
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
from typing import Any, Literal

from runfacts.schemas.errors import ConfigError

TOKEN_VERSION = "v2"
TOKEN_VERSIONS = ("v1", "v2")
MAX_TOKEN_CHARS = 4096
MIN_KEY_BYTES = 32
MAC_CONTEXT = b"runfacts.approval."
KID_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
B64URL = re.compile(r"^[A-Za-z0-9_-]+$")

TokenDenial = Literal[
    "token_missing",
    "token_malformed",
    "token_unknown_key",
    "token_retired_key",
    "token_bad_signature",
    "token_expired",
    "token_claims_mismatch",
]


@dataclass(frozen=True)
class ApprovalBinding:
    """What an approval token is bound to: the decider compares it with the run's state."""

    run_id: str
    approval_id: str
    args_hash: str
    decision: str
    subject_id: str
    display_digest: str | None = None


@dataclass(frozen=True)
class ApprovalClaims:
    """Signed claims: the binding plus the instant (ms since epoch) the token expires."""

    run_id: str
    approval_id: str
    args_hash: str
    decision: str
    subject_id: str
    expires_at_ms: int
    display_digest: str | None = None

    def binding(self) -> ApprovalBinding:
        """The claims without the expiry."""
        return ApprovalBinding(self.run_id, self.approval_id, self.args_hash, self.decision, self.subject_id,
                               self.display_digest)


@dataclass(frozen=True)
class SigningKey:
    """One HMAC key; `verify_until_ms` ends its grace period (None: until listed as retired)."""

    secret: bytes = field(repr=False)
    verify_until_ms: int | None = None


@dataclass(frozen=True)
class Keyring:
    """Verification keys by id, the id to issue with, and retired ids (always rejected)."""

    keys: Mapping[str, SigningKey]
    current: str | None = None
    retired: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        for kid, key in self.keys.items():  # (the same keyrings hold command source keys)
            if not KID_PATTERN.match(kid):
                raise ConfigError("signing key id", kid, f"must match {KID_PATTERN.pattern}")
            if len(key.secret) < MIN_KEY_BYTES:
                raise ConfigError(f"signing key {kid}", "<secret>", f"shorter than {MIN_KEY_BYTES} bytes")
        both = sorted(self.retired & set(self.keys))
        if both:
            raise ConfigError("signing key id", both[0], "listed as retired and still holds a key")
        if self.current is not None and self.current not in self.keys:
            raise ConfigError("keyring current", self.current, "no such key")
        object.__setattr__(self, "keys", MappingProxyType(dict(self.keys)))


def issue_token(keyring: Keyring, kid: str, claims: ApprovalClaims) -> str:
    """A token over `claims` signed with key `kid`; a ConfigError for a missing or retired key."""
    if kid in keyring.retired or kid not in keyring.keys:
        raise ConfigError("approval signing key", kid, "not an active key of the keyring")
    payload = _b64encode(_canonical(claims))
    signed = f"{TOKEN_VERSION}.{kid}.{payload}"
    return f"{signed}.{_b64encode(_mac(keyring.keys[kid].secret, signed))}"


def verify_token(
    keyring: Keyring, token: str | None, expected: ApprovalBinding, now_ms: int
) -> TokenDenial | None:
    """None when `token` is a valid, unexpired signature over exactly `expected`; else why not."""
    if not token:
        return "token_missing"
    parts = _split(token)
    if parts is None:
        return "token_malformed"
    version, kid, payload, signature = parts
    key = keyring.keys.get(kid)
    if kid in keyring.retired or (key and key.verify_until_ms is not None and now_ms >= key.verify_until_ms):
        return "token_retired_key"
    if key is None:
        return "token_unknown_key"
    if not hmac.compare_digest(_mac(key.secret, f"{version}.{kid}.{payload}"), signature):
        return "token_bad_signature"
    claims = _decode_claims(payload, version)
    if claims is None:
        return "token_malformed"
    if claims.binding() != expected:
        return "token_claims_mismatch"
    if now_ms >= claims.expires_at_ms:
        return "token_expired"
    return None


def _split(token: str) -> tuple[str, str, str, bytes] | None:
    """(version, kid, payload text, signature bytes) of a well-formed token, else None."""
    if len(token) > MAX_TOKEN_CHARS:
        return None
    parts = token.split(".")
    if len(parts) != 4 or parts[0] not in TOKEN_VERSIONS or not KID_PATTERN.match(parts[1]):
        return None
    if not (B64URL.match(parts[2]) and B64URL.match(parts[3])):
        return None
    signature = _b64decode(parts[3])
    if signature is None or len(signature) != hashlib.sha256().digest_size:
        return None
    return parts[0], parts[1], parts[2], signature


def _mac(secret: bytes, signed: str) -> bytes:
    return hmac.new(secret, MAC_CONTEXT + signed.encode("ascii"), hashlib.sha256).digest()


def _canonical(claims: ApprovalClaims) -> bytes:
    body = {
        "runId": claims.run_id,
        "approvalId": claims.approval_id,
        "argsHash": claims.args_hash,
        "decision": claims.decision,
        "subjectId": claims.subject_id,
        "expiresAtMs": claims.expires_at_ms,
        "displayDigest": claims.display_digest,
    }
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def _decode_claims(payload: str, version: str) -> ApprovalClaims | None:
    raw = _b64decode(payload)
    try:
        body: Any = json.loads(raw) if raw is not None else None
    except ValueError:
        return None
    names = ("runId", "approvalId", "argsHash", "decision", "subjectId")
    display = ("displayDigest",) if version != "v1" else ()
    if not isinstance(body, dict) or set(body) != {*names, "expiresAtMs", *display}:
        return None
    if not all(isinstance(body[n], str) for n in names) or type(body["expiresAtMs"]) is not int:
        return None
    digest = body.get("displayDigest")
    if digest is not None and not isinstance(digest, str):
        return None
    return ApprovalClaims(run_id=body["runId"], approval_id=body["approvalId"], args_hash=body["argsHash"],
                          decision=body["decision"], subject_id=body["subjectId"],
                          expires_at_ms=body["expiresAtMs"], display_digest=digest)


def _b64encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64decode(text: str) -> bytes | None:
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        return None


def parse_keyring(text: str, source: str = "<keyring>") -> Keyring:
    """A keyring from JSON: {"current": kid, "keys": {kid: b64 | {"secret", "verifyUntilMs"}}, "retired": [kid]}.

    Error messages name the setting but never echo a secret.
    """
    try:
        data = json.loads(text)
    except ValueError:
        raise ConfigError(source, "<hidden>", "not valid JSON") from None
    return keyring_from(data, source)


def keyring_from(data: object, source: str = "<keyring>") -> Keyring:
    """A keyring from its parsed JSON object (`parse_keyring`'s format; also one source's entry
    of the source-key file, `runfacts.processors.policy.sources`)."""
    if not isinstance(data, dict) or not isinstance(data.get("keys"), dict):
        raise ConfigError(source, "<hidden>", 'expected an object with a "keys" object')
    unknown = sorted(set(data) - {"current", "keys", "retired"})
    if unknown:
        raise ConfigError(f"{source}:{unknown[0]}", "<hidden>", "unknown key")
    keys = {kid: _signing_key(entry, f"{source}:keys.{kid}") for kid, entry in data["keys"].items()}
    retired = data.get("retired", [])
    if not isinstance(retired, list) or not all(isinstance(k, str) for k in retired):
        raise ConfigError(f"{source}:retired", retired, "expected a list of key ids")
    try:
        return Keyring(keys=keys, current=data.get("current"), retired=frozenset(retired))
    except ConfigError as exc:
        raise ConfigError(source, "<hidden>", str(exc)) from None


def _signing_key(entry: object, where: str) -> SigningKey:
    if isinstance(entry, str):
        entry = {"secret": entry}
    if not isinstance(entry, dict) or set(entry) - {"secret", "verifyUntilMs"}:
        raise ConfigError(where, "<hidden>", 'expected a base64 string or {"secret", "verifyUntilMs"}')
    until = entry.get("verifyUntilMs")
    if until is not None and type(until) is not int:
        raise ConfigError(f"{where}.verifyUntilMs", until, "expected milliseconds since the epoch")
    secret = entry.get("secret")
    decoded = _b64decode(secret.replace("+", "-").replace("/", "_").rstrip("=")) if isinstance(secret, str) else None
    if decoded is None:
        raise ConfigError(f"{where}.secret", "<hidden>", "expected base64")
    return SigningKey(secret=decoded, verify_until_ms=until)

"""API keys: who a caller is (an actor) and which auth source the gateway signs its commands as.

A key file (or RUNFACTS_GATEWAY_KEYS, the same JSON) maps a key name to the key's secret, or
its sha256, and the actor the gateway puts on every command that key sends:

    {"refund-agent": {"sha256": "<hex of sha256(secret)>", "subjectId": "refund-agent",
                      "roles": ["agent"], "source": "agent-harness"},
     "alice":        {"secret": "<secret>", "subjectId": "alice", "roles": ["support_agent"],
                      "tenant": "acme", "source": "dashboard"}}

A caller sends `Authorization: Bearer <secret>`. The caller never names its actor: the subject,
roles, tenant and source come from the key, and the gateway signs with the source's key
(RUNFACTS_SOURCE_KEYS[_FILE]) server-side, so a browser never holds a signing key.

Pure: parsing and lookup (the secret compared by its sha256 in constant time); loading from the
environment or a file is `load_api_keys`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from runfacts.schemas.common import Actor
from runfacts.schemas.errors import ConfigError
from runfacts.secretfiles import configured_secret

ENV_KEYS = "RUNFACTS_GATEWAY_KEYS"
ENV_KEYS_FILE = "RUNFACTS_GATEWAY_KEYS_FILE"
_HEX = re.compile(r"^[0-9a-f]{64}$")
MIN_SECRET_CHARS = 16


@dataclass(frozen=True)
class ApiKey:
    """One key: its name (rate limits and idempotency are per key) and the actor it stands for."""

    name: str
    digest: str
    actor: Actor

    def __repr__(self) -> str:  # never the digest
        return f"ApiKey({self.name!r}, {self.actor.subjectId!r}, source={self.actor.authSource!r})"


@dataclass(frozen=True)
class ApiKeys:
    """The keys the gateway accepts."""

    keys: tuple[ApiKey, ...]

    def find(self, secret: str) -> ApiKey | None:
        """The key whose secret this is (every key compared, in constant time each)."""
        digest = hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()
        found = None
        for key in self.keys:
            if hmac.compare_digest(key.digest, digest):
                found = key
        return found

    @property
    def sources(self) -> frozenset[str]:
        """The auth sources the gateway must hold a signing key for."""
        return frozenset(k.actor.authSource for k in self.keys)


def parse_api_keys(text: str, where: str = ENV_KEYS) -> ApiKeys:
    """ApiKeys from the JSON above; a ConfigError naming the key and the field (never a secret)."""
    try:
        data = json.loads(text)
    except ValueError:
        raise ConfigError(where, "<hidden>", "not valid JSON") from None
    if not isinstance(data, dict) or not data:
        raise ConfigError(where, "<hidden>", 'expected {"<key name>": {"secret" or "sha256", "subjectId", '
                                             '"roles", "source", "tenant"?}}')
    keys = []
    for name, entry in data.items():
        keys.append(_key(where, name, entry))
    digests = [k.digest for k in keys]
    if len(set(digests)) != len(digests):
        raise ConfigError(where, "<hidden>", "two keys share one secret: give each caller its own")
    return ApiKeys(tuple(keys))


def _key(where: str, name: str, entry: object) -> ApiKey:
    if not isinstance(entry, Mapping):
        raise ConfigError(f"{where}:{name}", "<hidden>", "expected an object")
    unknown = sorted(set(entry) - {"secret", "sha256", "subjectId", "roles", "tenant", "source"})
    if unknown:
        raise ConfigError(f"{where}:{name}.{unknown[0]}", "<hidden>",
                          "unknown field; use secret or sha256, subjectId, roles, tenant, source")
    secret, digest = entry.get("secret"), entry.get("sha256")
    if (secret is None) == (digest is None):
        raise ConfigError(f"{where}:{name}", "<hidden>", "give exactly one of secret and sha256")
    if secret is not None:
        if not isinstance(secret, str) or len(secret) < MIN_SECRET_CHARS:
            raise ConfigError(f"{where}:{name}.secret", "<hidden>", f"at least {MIN_SECRET_CHARS} characters")
        digest = hashlib.sha256(secret.encode()).hexdigest()
    if not isinstance(digest, str) or not _HEX.match(digest):
        raise ConfigError(f"{where}:{name}.sha256", "<hidden>", "64 lower-case hex digits (sha256 of the secret)")
    subject, roles, source = entry.get("subjectId"), entry.get("roles"), entry.get("source")
    tenant = entry.get("tenant")
    if not isinstance(subject, str) or not subject.strip():
        raise ConfigError(f"{where}:{name}.subjectId", subject, "a non-empty string: who this key acts as")
    if not isinstance(roles, list) or not roles or not all(isinstance(r, str) and r for r in roles):
        raise ConfigError(f"{where}:{name}.roles", roles, 'a non-empty list of role names, e.g. ["agent"]')
    if not isinstance(source, str) or not source.strip():
        raise ConfigError(f"{where}:{name}.source", source, "the auth source its commands are signed as, "
                                                            "e.g. agent-harness or dashboard")
    if tenant is not None and (not isinstance(tenant, str) or not tenant):
        raise ConfigError(f"{where}:{name}.tenant", tenant, "a tenant name, or leave it out")
    return ApiKey(name, digest, Actor(subjectId=subject, roles=tuple(roles), tenant=tenant, authSource=source))


def load_api_keys(environ: Mapping[str, str] | None = None) -> ApiKeys:
    """The keys from $RUNFACTS_GATEWAY_KEYS_FILE (mode 600) or $RUNFACTS_GATEWAY_KEYS."""
    found = configured_secret(os.environ if environ is None else environ, ENV_KEYS_FILE, ENV_KEYS)
    if found is None:
        raise ConfigError(ENV_KEYS, None, f"the gateway accepts no caller without keys: set {ENV_KEYS_FILE} "
                                          f"(a mode-600 JSON file) or {ENV_KEYS}")
    return parse_api_keys(*found)


__all__ = ["ENV_KEYS", "ENV_KEYS_FILE", "ApiKey", "ApiKeys", "load_api_keys", "parse_api_keys"]

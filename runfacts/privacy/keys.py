"""Loading the privacy keys (KEKs and the pseudonym key) from a secret file or the environment.

First match wins, as for the approval and source keys (`processors.policy.keyring`):
1. an explicit `path` (a secret file, mode 600);
2. RUNFACTS_PII_KEYS_FILE, the path of such a file;
3. RUNFACTS_PII_KEYS, the JSON itself.
Format (base64 or base64url secrets, each KEK exactly 32 bytes):

    {"current": "kek-2026-12", "keys": {"kek-2026-12": "<b64>", "kek-2026-06": "<b64>"},
     "pseudonymKey": "<b64, 32+ bytes>"}

Rotation: add a key, make it `current` (new data keys are wrapped with it), run
`runfacts erase rewrap` to rewrap the older data keys, then drop the old id. The pseudonym key
never rotates (pseudonyms must stay equal for the same subject); keep it as long as the log.
No keys configured: encryption is off (`load_privacy_keys_if_configured` returns None).
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Mapping
from pathlib import Path

from runfacts.privacy.envelope import KEY_BYTES, NONCE_BYTES, PrivacyKeys, b64, unb64
from runfacts.schemas.errors import ConfigError
from runfacts.secretfiles import configured_secret

ENV_PII_KEYS = "RUNFACTS_PII_KEYS"
ENV_PII_KEYS_FILE = "RUNFACTS_PII_KEYS_FILE"


def parse_privacy_keys(text: str, source: str = "<privacy keys>") -> PrivacyKeys:
    """PrivacyKeys from the JSON above; errors name the setting, never a secret."""
    try:
        data = json.loads(text)
    except ValueError:
        raise ConfigError(source, "<hidden>", "not valid JSON") from None
    if not isinstance(data, dict) or not isinstance(data.get("keys"), dict) or not data["keys"]:
        raise ConfigError(source, "<hidden>", 'expected {"current", "keys": {id: b64}, "pseudonymKey"}')
    unknown = sorted(set(data) - {"current", "keys", "pseudonymKey"})
    if unknown:
        raise ConfigError(f"{source}:{unknown[0]}", "<hidden>", "unknown key")
    keks = {kid: _secret(value, f"{source}:keys.{kid}") for kid, value in data["keys"].items()}
    pseudonym_key = _secret(data.get("pseudonymKey"), f"{source}:pseudonymKey")
    current = data.get("current")
    if not isinstance(current, str):
        raise ConfigError(f"{source}:current", current, "expected the id of the KEK that wraps new data keys")
    return PrivacyKeys(keks, current, pseudonym_key)


def _secret(value: object, where: str) -> bytes:
    decoded = unb64(value.replace("+", "-").replace("/", "_").rstrip("=")) if isinstance(value, str) else None
    if decoded is None:
        raise ConfigError(where, "<hidden>", "expected base64")
    return decoded


def load_privacy_keys(path: Path | None = None, environ: Mapping[str, str] | None = None) -> PrivacyKeys:
    """The privacy keys from `path`, $RUNFACTS_PII_KEYS_FILE or $RUNFACTS_PII_KEYS."""
    found = configured_secret(os.environ if environ is None else environ, ENV_PII_KEYS_FILE, ENV_PII_KEYS, path)
    if found is None:
        raise ConfigError(ENV_PII_KEYS, None, f"no privacy keys: set {ENV_PII_KEYS_FILE} or {ENV_PII_KEYS}")
    return parse_privacy_keys(*found)


def load_privacy_keys_if_configured(environ: Mapping[str, str] | None = None) -> PrivacyKeys | None:
    """The privacy keys when configured; None (personal fields stay plain) otherwise."""
    env = os.environ if environ is None else environ
    if env.get(ENV_PII_KEYS_FILE) or env.get(ENV_PII_KEYS):
        return load_privacy_keys(environ=env)
    return None


def new_privacy_keys_json(kid: str = "kek-1") -> str:
    """A fresh keys file's JSON (one KEK, a pseudonym key), for `runfacts erase keygen` and tests."""
    return json.dumps({"current": kid, "keys": {kid: b64(secrets.token_bytes(KEY_BYTES))},
                       "pseudonymKey": b64(secrets.token_bytes(KEY_BYTES))})


def random_nonce() -> bytes:
    """A fresh 96-bit AES-GCM nonce."""
    return os.urandom(NONCE_BYTES)


def random_key() -> bytes:
    """A fresh 256-bit data key."""
    return os.urandom(KEY_BYTES)


def random_dek_id() -> str:
    """A fresh data key id (64 bits, hex)."""
    return secrets.token_hex(8)

"""Loading signing keys from the environment or a secret file (never from events).

Approval keys, first match wins:
1. an explicit `path` (a secret file, e.g. mounted by the orchestrator);
2. RUNFACTS_APPROVAL_KEYS_FILE, the path of such a file;
3. RUNFACTS_APPROVAL_KEYS, the keyring JSON itself.
The JSON format is `approvals.parse_keyring`'s. Command source keys (one keyring per auth
source, `sources.parse_source_keys`) come the same way from RUNFACTS_SOURCE_KEYS_FILE or
RUNFACTS_SOURCE_KEYS. A file must not be readable by group or others (mode 600), like an ssh key.
"""

from __future__ import annotations

import base64
import os
import secrets
from collections.abc import Mapping
from pathlib import Path

from runfacts.processors.policy.approvals import MIN_KEY_BYTES, Keyring, parse_keyring
from runfacts.processors.policy.sources import SourceKeys, parse_source_keys
from runfacts.schemas.errors import ConfigError
from runfacts.secretfiles import configured_secret

ENV_KEYS = "RUNFACTS_APPROVAL_KEYS"
ENV_KEYS_FILE = "RUNFACTS_APPROVAL_KEYS_FILE"
ENV_SOURCE_KEYS = "RUNFACTS_SOURCE_KEYS"
ENV_SOURCE_KEYS_FILE = "RUNFACTS_SOURCE_KEYS_FILE"


def load_keyring(path: Path | None = None, environ: Mapping[str, str] | None = None) -> Keyring:
    """The approval keyring from `path`, $RUNFACTS_APPROVAL_KEYS_FILE or $RUNFACTS_APPROVAL_KEYS."""
    found = configured_secret(os.environ if environ is None else environ, ENV_KEYS_FILE, ENV_KEYS, path)
    if found is None:
        raise ConfigError(ENV_KEYS, None, f"no approval keys: set {ENV_KEYS_FILE} or {ENV_KEYS}")
    return parse_keyring(*found)


def new_secret() -> str:
    """A fresh random key, base64url, for a keyring entry."""
    return base64.urlsafe_b64encode(secrets.token_bytes(MIN_KEY_BYTES)).rstrip(b"=").decode("ascii")


def load_keyring_if_configured(environ: Mapping[str, str] | None = None) -> Keyring | None:
    """The keyring when one is configured; None (approvals need no signed token) otherwise."""
    env = os.environ if environ is None else environ
    if env.get(ENV_KEYS_FILE) or env.get(ENV_KEYS):
        return load_keyring(environ=env)
    return None


def load_source_keys_if_configured(environ: Mapping[str, str] | None = None) -> SourceKeys | None:
    """The command source keys from $RUNFACTS_SOURCE_KEYS_FILE or $RUNFACTS_SOURCE_KEYS; None
    when neither is set (commands go unsigned, and the decider does not check signatures)."""
    found = configured_secret(os.environ if environ is None else environ, ENV_SOURCE_KEYS_FILE, ENV_SOURCE_KEYS)
    return None if found is None else parse_source_keys(*found)

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
import stat
from collections.abc import Mapping
from pathlib import Path

from runfacts.processors.policy.approvals import MIN_KEY_BYTES, Keyring, parse_keyring
from runfacts.processors.policy.sources import SourceKeys, parse_source_keys
from runfacts.schemas.errors import ConfigError

ENV_KEYS = "RUNFACTS_APPROVAL_KEYS"
ENV_KEYS_FILE = "RUNFACTS_APPROVAL_KEYS_FILE"
ENV_SOURCE_KEYS = "RUNFACTS_SOURCE_KEYS"
ENV_SOURCE_KEYS_FILE = "RUNFACTS_SOURCE_KEYS_FILE"


def load_keyring(path: Path | None = None, environ: Mapping[str, str] | None = None) -> Keyring:
    """The approval keyring from `path`, $RUNFACTS_APPROVAL_KEYS_FILE or $RUNFACTS_APPROVAL_KEYS."""
    env = os.environ if environ is None else environ
    if path is None and env.get(ENV_KEYS_FILE):
        path = Path(env[ENV_KEYS_FILE])
    if path is not None:
        return parse_keyring(_read_secret_file(Path(path)), str(path))
    if env.get(ENV_KEYS):
        return parse_keyring(env[ENV_KEYS], ENV_KEYS)
    raise ConfigError(ENV_KEYS, None, f"no approval keys: set {ENV_KEYS_FILE} or {ENV_KEYS}")


def _read_secret_file(path: Path, setting: str = ENV_KEYS_FILE) -> str:
    try:
        mode = path.stat().st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise ConfigError(setting, str(path), f"mode {stat.filemode(mode)}: chmod 600 (owner only)")
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(setting, str(path), f"cannot read: {exc.strerror}") from exc


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
    env = os.environ if environ is None else environ
    if env.get(ENV_SOURCE_KEYS_FILE):
        path = Path(env[ENV_SOURCE_KEYS_FILE])
        return parse_source_keys(_read_secret_file(path, ENV_SOURCE_KEYS_FILE), str(path))
    if env.get(ENV_SOURCE_KEYS):
        return parse_source_keys(env[ENV_SOURCE_KEYS], ENV_SOURCE_KEYS)
    return None

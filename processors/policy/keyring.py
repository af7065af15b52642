"""Loading approval signing keys from the environment or a secret file (never from events).

Sources, first match wins:
1. an explicit `path` (a secret file, e.g. mounted by the orchestrator);
2. RUNFACTS_APPROVAL_KEYS_FILE, the path of such a file;
3. RUNFACTS_APPROVAL_KEYS, the keyring JSON itself.
The file must not be readable by group or others (mode 600), like an ssh key.
The JSON format is `approval_tokens.parse_keyring`'s.
"""

from __future__ import annotations

import base64
import os
import secrets
import stat
from collections.abc import Mapping
from pathlib import Path

from runfacts.processors.policy.approvals import MIN_KEY_BYTES, Keyring, parse_keyring
from runfacts.schemas.errors import ConfigError

ENV_KEYS = "RUNFACTS_APPROVAL_KEYS"
ENV_KEYS_FILE = "RUNFACTS_APPROVAL_KEYS_FILE"


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


def _read_secret_file(path: Path) -> str:
    try:
        mode = path.stat().st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise ConfigError(ENV_KEYS_FILE, str(path), f"mode {stat.filemode(mode)}: chmod 600 (owner only)")
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(ENV_KEYS_FILE, str(path), f"cannot read: {exc.strerror}") from exc


def new_secret() -> str:
    """A fresh random key, base64url, for a keyring entry."""
    return base64.urlsafe_b64encode(secrets.token_bytes(MIN_KEY_BYTES)).rstrip(b"=").decode("ascii")


def load_keyring_if_configured(environ: Mapping[str, str] | None = None) -> Keyring | None:
    """The keyring when one is configured; None (approvals need no signed token) otherwise."""
    env = os.environ if environ is None else environ
    if env.get(ENV_KEYS_FILE) or env.get(ENV_KEYS):
        return load_keyring(environ=env)
    return None

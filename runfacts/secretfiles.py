"""Secrets from the environment or a secret file (keys are never in code or topics): the one
way approval keys, source keys and privacy keys are found, and the one file-mode check."""

from __future__ import annotations

import stat
from collections.abc import Mapping
from pathlib import Path

from runfacts.schemas.errors import ConfigError


def read_secret_file(path: Path, setting: str) -> str:
    """The text of a secret file the owner alone may read (ConfigError naming `setting` otherwise)."""
    try:
        mode = path.stat().st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise ConfigError(setting, str(path), f"mode {stat.filemode(mode)}: chmod 600 (owner only)")
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(setting, str(path), f"cannot read: {exc.strerror}") from exc


def configured_secret(environ: Mapping[str, str], file_setting: str, setting: str,
                      path: Path | None = None) -> tuple[str, str] | None:
    """(text, where it came from) of `path`, else the file $`file_setting` names, else
    $`setting`'s value; None when none is given."""
    if path is None and environ.get(file_setting):
        path = Path(environ[file_setting])
    if path is not None:
        return read_secret_file(Path(path), file_setting), str(path)
    if environ.get(setting):
        return environ[setting], setting
    return None


__all__ = ["configured_secret", "read_secret_file"]

"""Issue 39.9: `runfacts demo --keep-topics` keeps the privacy keys its runs are sealed under (a
file only its owner reads, reused by the next demo), so the console can reveal them to an
auditor instead of `[erased]` everywhere."""

from __future__ import annotations

import stat
from pathlib import Path

from runfacts.cli.demo import kept_keys
from runfacts.privacy.keys import parse_privacy_keys


def test_kept_keys_are_written_owner_only_and_reused(tmp_path: Path):
    path = tmp_path / "dir" / "keys.json"

    first = kept_keys(path)
    again = kept_keys(path)

    assert first == again and parse_privacy_keys(first).current == "demo-kek-1"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600

"""The runfacts command against the real broker: demo, topics apply, readable errors."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration


def _runfacts(kafka_bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, RUNFACTS_KAFKA_BOOTSTRAP_SERVERS=kafka_bootstrap, COLUMNS="200")
    return subprocess.run([sys.executable, "-m", "runfacts.cli", *args], env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def test_topics_apply_prints_one_line_error_when_partitions_disagree(kafka_bootstrap: str, unique: str) -> None:
    ok = _runfacts(kafka_bootstrap, "topics", "apply", "--prefix", f"cli{unique}")
    bad = _runfacts(kafka_bootstrap, "topics", "apply", "--prefix", f"cli{unique}", "--partitions", "3")
    assert ok.returncode == 0, ok.stderr
    assert f"cli{unique}.run.events" in ok.stdout and "created" in ok.stdout
    assert bad.returncode == 2  # a ConfigError: the topic disagrees with the spec
    assert "Traceback" not in bad.stderr
    assert f"cli{unique}.run.commands partitions" in bad.stderr and "spec wants 3" in bad.stderr

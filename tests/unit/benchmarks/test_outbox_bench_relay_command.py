"""benchmarks/outbox_bench.py starts the relay with a command line that really runs the relay
(`python -m runfacts.cli.outbox` ran nothing once the CLI became one module per group)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def test_the_benchmarks_relay_command_runs_the_relay():
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        from outbox_bench import relay_command
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    command = relay_command("postgresql://u@127.0.0.1:1/db", "127.0.0.1:1", "ob", exit_when_idle=True)
    result = subprocess.run([*command, "--help"], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert "Publish the outbox to Kafka" in result.stdout

"""The decider's cost-curve benchmark (issue 24) at toy size on the real broker: every mode
drives the real decider worker and writes one CSV row per point and its plot. (No timing is
asserted: the numbers are the benchmark's to report, not a test's.)"""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MODES = {
    "age": ["--ages", "0,8", "--runs", "3", "--rate", "20", "--seconds", "2"],
    "load": ["--capacity", "60", "--loads", "0.5", "--runs", "3", "--age", "2", "--seconds", "2"],
    "rss": ["--counts", "200,500", "--batch", "100", "--idle-seconds", "1"],
}


@pytest.mark.integration
@pytest.mark.parametrize("mode", sorted(MODES))
def test_decider_curves_write_a_row_per_point_and_a_plot_when_run_at_toy_size(
        kafka_bootstrap: str, tmp_path: Path, mode: str) -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks/decider_curves.py"), mode, *MODES[mode], "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap})
    found = re.search(r"^results: (\S+)$", done.stdout, re.MULTILINE)
    assert done.returncode == 0 and found, f"{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    rows = list(csv.DictReader(Path(found.group(1)).read_text().splitlines()))
    assert len(rows) == {"age": 2, "load": 1, "rss": 3}[mode]
    assert mode == "rss" or all(float(r["cpu_us_per_command"]) > 0 for r in rows)
    if mode == "rss":  # the idle worker first (no runs, no commands), then a row per count
        idle, rows = rows[0], rows[1:]
        assert all(float(r["cpu_us_per_command"]) > 0 for r in rows)
        assert int(float(idle["x"])) == 0 and float(idle["rss_mb"]) > 0
        assert [int(float(r["x"])) for r in rows] == [200, 500]
        assert all(float(r["rss_mb"]) > 0 and float(r["disk_bytes_per_run"]) > 0 for r in rows)
    else:
        assert all(0 < float(r["p50_ms"]) <= float(r["p99_ms"]) for r in rows)
    assert (tmp_path / f"decider-{mode}.png").stat().st_size > 1000

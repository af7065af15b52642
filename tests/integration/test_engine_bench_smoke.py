"""The engine benchmark harness at toy size on the real broker: every row it reports comes from a
processor that saw all its events, and the restore applies every changelog record. (No timing
is asserted: the numbers are the benchmark's to report, not a test's.)"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.integration
def test_engine_bench_reports_every_row_when_run_at_toy_size(kafka_bootstrap: str) -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks/engine_bench.py"), "--bootstrap", kafka_bootstrap,
         "--frameworks", "runfacts,floor,plain", "--events", "3000", "--runs", "50",
         "--restore-records", "4000", "--decider-commands", "500", "--repeat", "1", "--timeout", "90"],
        capture_output=True, text=True, timeout=600, check=False)
    found = re.search(r"^results: (\S+)$", done.stdout, re.MULTILINE)
    assert found, f"no results file reported:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    report = json.loads(Path(found.group(1)).read_text())
    rows = {(r["framework"], r["guarantee"]): r for r in report["results"]}
    expected = {(f, g) for f in ("runfacts", "floor", "plain", "decider")
                for g in ("at_least_once", "exactly_once")}
    assert set(rows) == expected
    for key, row in rows.items():
        assert row["ok"], f"{key}: {row['note']}"
        sent = 500 if key[0] == "decider" else 3000  # decider: 50 runs x 10 commands
        assert row["events"] == sent - 1  # measured from the first to the last event
        assert row["cpu_s"] > 0 and row["wall_s"] > 0
    assert report["restore"]["ok"] and report["restore"]["records"] == 4000
    assert report["restore"]["consume_only"]["records"] == 4000  # the same changelog, read only
    assert "consume-only loop over the same changelog" in done.stdout
    assert "runfacts reaches" in done.stdout  # the floor comparison is printed
    bound = re.search(r"a decider that decides nothing, with these serializers: ([\d.]+) CPU-µs a command "
                      r".* = at most (\d+)% of the floor loop's events per CPU-s", done.stdout)
    assert bound and float(bound.group(1)) > 0 and int(bound.group(2)) > 0, "decider_bound.py's line"
    assert re.search(r"the decider \(no user view\) costs [\d.]+ CPU-µs a command: \d+% of its speed",
                     done.stdout), "the decider against the bound"
    bar = r"^info  decider / floor loop, events per CPU-s \(exactly_once; median of 1 rounds"
    assert re.search(bar, done.stdout, re.MULTILINE), "the decider against the floor (information), round by round"
    assert not re.search(r"^(PASS|FAIL)  decider", done.stdout, re.MULTILINE), "issue 24's floor bar is retired"

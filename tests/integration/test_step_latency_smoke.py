"""benchmarks/step_latency.py at toy size on the real broker: the packaged decider and dispatcher,
the client, the automatic approver and the floor's pass-through stages all run, every line of
the report is printed and its numbers are sane. (No timing is asserted: the numbers are the
benchmark's to report, not a test's.)"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LINE = r"p50 ([\d.]+) ms, p90 ([\d.]+), p99 ([\d.]+), max ([\d.]+), min ([\d.]+) over (\d+) \((\d+) rounds"


@pytest.mark.integration
def test_step_latency_reports_every_figure_at_toy_size(kafka_bootstrap: str) -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks/step_latency.py"), "--bootstrap", kafka_bootstrap,
         "--calls", "12", "--approvals", "4", "--starts", "4", "--rounds", "2", "--warmup", "2",
         "--floor-stages", "2", "--hops"],
        capture_output=True, text=True, timeout=600, check=False)
    out = done.stdout
    found = re.search(r"^results: (\S+)$", out, re.MULTILINE)
    assert found, f"no results file reported:\n{out[-3000:]}\n{done.stderr[-3000:]}"
    for name, count in (("start_run acknowledged", 4), ("propose \\(the decider's answer\\)", 12),
                        ("propose -> result\\(\\), no approval", 12),
                        ("propose -> result\\(\\), automatic approver", 4),
                        ("the log's floor \\(2 transactional pass-through stages, 3 crossings\\)", 12)):
        line = re.search(f"{name}: {LINE}", out)
        assert line, f"no {name!r} line:\n{out[-3000:]}"
        p50, p90, p99, most, least, n, rounds = (float(g) for g in line.groups())
        assert 0 < least <= p50 <= p90 <= p99 <= most < 60_000, line.group(0)
        assert (n, rounds) == (count, 2), line.group(0)
    assert re.search(r"runfacts / floor: p50 [\d.]+x, p99 [\d.]+x", out)
    # where the time goes: from the agent's propose through the proposal command to the result
    assert re.search(r"propose\(\) called -> tool\.call\.propose: [\d.]+ / [\d.]+", out), out[-3000:]
    assert re.search(r"tool\.call\.completed -> result\(\) returned: [\d.]+ / [\d.]+", out), out[-3000:]
    for bar in ("start_run p50", "step p50", "step p99", "approved step p50"):
        assert re.search(f"^(PASS|FAIL)  runfacts {bar}: [\\d.]+ ms", out, re.MULTILINE), bar
    assert re.search(r"load average [\d.]+ [\d.]+ [\d.]+ at the start", out)
    report = json.loads(Path(found.group(1)).read_text())
    stats = report["variants"]["runfacts"]["stats"]
    assert stats["call.total"]["n"] == 12 and stats["approve.total"]["n"] == 4
    assert report["floor"]["n"] == 12

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
         "--floor-stages", "2", "--hops", "--idle-seconds", "0.5", "--load", "0.5", "--load-seconds", "2",
         "--load-rounds", "1", "--capacity-threads", "2", "--capacity-seconds", "2"],
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
    # the load phase (bars 1, 2, 4): capacity, a row at 50%, the view, steps per CPU-second, the summary
    capacity = re.search(r"^capacity runfacts: 2 callers -> ([\d.]+) steps/s", out, re.MULTILINE)
    assert capacity and float(capacity.group(1)) > 0, out[-3000:]
    row = re.search(r"^  \| 50% \| ([\d.]+) \| ([\d.]+) \| .* \| ([\d.]+) \| ([\d.]+) \| (\d+) \(\d+-\d+\) "
                    r"\| (\d+) \(\d+-\d+\) \| 0 \(\+0 views unseen\) \|$", out, re.MULTILINE)
    assert row, f"no 50% row of the load table:\n{out[-3000:]}"
    rate, p50, view_p50, view_p99, own, stack = (float(g) for g in row.groups())
    assert rate > 0 and p50 > 0 and 0 < view_p50 <= view_p99 and own >= stack > 0, row.group(0)
    assert re.search(r"durable steps per CPU-second, one call at a time .*: runfacts' processes \d+", out)
    assert re.search(r"CPU ms a call, one at a time .*: agent [\d.]+, broker [\d.]+, decider [\d.]+, "
                     r"dispatcher [\d.]+", out), out[-3000:]
    assert re.search(r"^idle runfacts: CPU share of a core", out, re.MULTILINE)
    assert re.search(r"^\| runfacts \| [\d.]+ \| [\d.]+ / [\d.]+ \| [\d.]+x \|", out, re.MULTILINE), out[-3000:]
    assert re.search(r"^(PASS|FAIL)  runfacts view p99 at 70%", out, re.MULTILINE) is None  # no 70% share asked
    report = json.loads(Path(found.group(1)).read_text())
    assert report["variants"]["runfacts"]["capacity"] == pytest.approx(float(capacity.group(1)), rel=0.01)
    stats = report["variants"]["runfacts"]["stats"]
    assert stats["call.total"]["n"] == 12 and stats["approve.total"]["n"] == 4
    assert report["floor"]["n"] == 12

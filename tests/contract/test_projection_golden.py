"""Golden run log replayed through the projections: audit records and trajectories must not
drift (an audit trail written today has to verify with tomorrow's code).

The checked-in files were written by this module's `write_golden()` (run it by hand, only
when a format change is intended and versioned):
- `runlog.events`: a scripted log (RunScript seed 5, 4 runs), each framed event prefixed by
  its 4-byte big-endian length;
- `audit.records`: the audit record bodies of that log, same framing;
- `trajectories.jsonl`: the trajectory export of that log (format 2);
- `trajectories.v1.jsonl`: the format-1 export of that log, as format 1 wrote it: format 2 only
  added fields, so the format-2 export without them must give it back byte for byte.
"""

from __future__ import annotations

import json
from pathlib import Path

from runfacts.dev.runscript import RunScript, encode_event
from runfacts.projections.audit import reducer as audit
from runfacts.projections.audit.check import ChainCheck
from runfacts.projections.eventlog import EventReader
from runfacts.projections.facts import ReadSettings
from runfacts.projections.trajectory import model as trajectory_model
from runfacts.projections.trajectory import reducer as trajectory

GOLDEN = Path(__file__).parent / "golden" / "projections"
TOPIC = "runfacts.run.events"


def _frames(path: Path) -> list[bytes]:
    data, out, pos = path.read_bytes(), [], 0
    while pos < len(data):
        size = int.from_bytes(data[pos:pos + 4], "big")
        out.append(data[pos + 4:pos + 4 + size])
        pos += 4 + size
    return out


def _audit(values: list[bytes]) -> list[bytes]:
    reader = EventReader(ReadSettings(decode=False))
    heads: dict[str, audit.ChainHead] = {}
    out = []
    for offset, value in enumerate(values):
        fact = reader.fact(value, TOPIC, 0, offset)
        summary = audit.summarize(fact)
        heads[summary.run_id], body = audit.link(heads.get(summary.run_id), fact, summary)
        out.append(body)
    return out


def _trajectories(values: list[bytes]) -> str:
    reader = EventReader(trajectory.READS)
    views: dict[str, trajectory_model.State] = {}
    for offset, value in enumerate(values):
        fact = reader.fact(value, TOPIC, 0, offset)
        views[fact.run_id] = trajectory.evolve(views.get(fact.run_id), fact)
    return "".join(json.dumps(trajectory_model.as_json(views[r]), separators=(",", ":")) + "\n"
                   for r in sorted(views))


def test_golden_log_gives_the_golden_audit_records_when_replayed() -> None:
    values = _frames(GOLDEN / "runlog.events")
    assert _audit(values) == _frames(GOLDEN / "audit.records")


def test_golden_audit_verifies_against_the_golden_log_when_checked() -> None:
    reader = EventReader(ReadSettings(decode=False))
    check = ChainCheck()
    for offset, value in enumerate(_frames(GOLDEN / "runlog.events")):
        check.expected(reader.fact(value, TOPIC, 0, offset))
    for offset, body in enumerate(_frames(GOLDEN / "audit.records")):
        check.stored(body, f"golden[0]@{offset}")
    assert check.finish() == [] and check.verified_runs == 4


def test_golden_log_gives_the_golden_trajectories_when_replayed() -> None:
    values = _frames(GOLDEN / "runlog.events")
    assert _trajectories(values) == (GOLDEN / "trajectories.jsonl").read_text()


def _as_v1(line: str) -> str:
    record = json.loads(line)
    record.pop("graphSteps")
    for step in record["steps"]:
        step.pop("graphStep")
    return json.dumps({**record, "formatVersion": 1}, separators=(",", ":")) + "\n"


def test_golden_trajectories_are_the_format_1_ones_plus_graph_steps_when_replayed() -> None:
    lines = _trajectories(_frames(GOLDEN / "runlog.events")).splitlines(keepends=True)
    assert "".join(map(_as_v1, lines)) == (GOLDEN / "trajectories.v1.jsonl").read_text()
    # the scripted runs checkpoint at the end of each turn: every step is in a graph step
    graph = [json.loads(line)["graphSteps"] for line in lines]
    assert all(g for g in graph) and all(s["graphStep"] for line in lines for s in json.loads(line)["steps"])


def write_golden() -> None:
    """Rewrite the golden files (by hand, for an intended and versioned format change; the
    format-1 trajectories stay as they were written)."""
    values = [encode_event(e) for e in RunScript(seed=5).log(4)]
    (GOLDEN / "runlog.events").write_bytes(b"".join(len(v).to_bytes(4, "big") + v for v in values))
    bodies = _audit(values)
    (GOLDEN / "audit.records").write_bytes(b"".join(len(b).to_bytes(4, "big") + b for b in bodies))
    (GOLDEN / "trajectories.jsonl").write_text(_trajectories(values))


if __name__ == "__main__":
    write_golden()

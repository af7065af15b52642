"""The decider shell rebuilds the evidence of a run state stored before runfacts kept it, from the
run's events (`DeciderShell.history`), once, when it loads the record; a current record never asks."""

from __future__ import annotations

from pathlib import Path

import decider_support as support

from runfacts.processors.decider.app import DeciderShell
from runfacts.topics import TopicNames

GOLDEN = Path(__file__).parents[2] / "contract" / "golden-state" / "run-state"


def test_shell_asks_the_history_for_a_state_stored_before_evidence_and_not_for_a_current_one() -> None:
    asked: list[str] = []

    def history(run_id: str) -> list[tuple[str, str]]:
        asked.append(run_id)
        return [("evt-1", "tool.call.completed"), ("evt-2", "tool.call.proposed"), ("evt-3", "approval.granted")]

    shell = DeciderShell(TopicNames("ev"), support.CTX, history=history)
    old = next(GOLDEN.glob("v2-*.json")).read_bytes().strip()
    current = next(GOLDEN.glob("v4-*.json")).read_bytes().strip()

    rebuilt = shell._load(b"run-old", old)
    assert rebuilt is not None and rebuilt.evidence == ("evt-1", "evt-3") and asked == [rebuilt.runId]
    assert shell._load(b"run-old", old) is rebuilt and len(asked) == 1  # cached: asked once
    loaded = shell._load(b"run-new", current)
    assert loaded is not None and len(loaded.evidence) > 100 and len(asked) == 1

"""Every released shape of every stored record is read by today's code (issue 18.3).

The fixtures in golden-state/ were written by golden-state/make_run_state.py from the code of
the commit in each file's name (`git archive <commit>`): run states before `settledCalls`
(1a16857), with ':'-joined `settledCalls` (e384e4b), with pairs but no version marker (8203370),
marked (`stateFormat` 2, the dedupe window as command ids), with the window as digests
(`stateFormat` 3), with an approval's requesters (`stateFormat` 4, c84833a) and with a call's
hold (`stateFormat` 5, a paused capability); dispatcher progress before and after `polls`,
marked, and with `throttles` (format 3); the timer index; the user view. A record newer than
this code knows is refused, naming the fix.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runfacts.processors.decider.state import DEDUPE_WINDOW, DIGEST_CHARS, STATE_FORMAT, RunState, command_digest
from runfacts.processors.decider.state_json import RUN_STATE, dump_state, load_state
from runfacts.processors.dispatcher.core import PROGRESS, Progress, load_progress
from runfacts.processors.engine.api import TIMER_STORE
from runfacts.processors.engine.store import MemoryBackend, PartitionState
from runfacts.processors.engine.timers import TIMER_FORMAT, Timers
from runfacts.processors.engine.versions import FIELD, NewerStoredVersion, StoredVersionError
from runfacts.projections import user_view
from runfacts.schemas.errors import InvalidInput

GOLDEN = Path(__file__).parent / "golden-state"
RUN_STATES = sorted((GOLDEN / "run-state").glob("*.json"))
PROGRESSES = sorted((GOLDEN / "progress").glob("*.json"))


def test_every_shape_has_a_fixture_when_the_golden_folder_is_listed() -> None:
    names = [p.name for p in RUN_STATES]
    assert any("before-settledCalls" in n for n in names)
    assert any("settledCalls-joined" in n for n in names)
    assert any(n.startswith("v2-") for n in names)  # the window as ids
    assert any(n.startswith(f"v{STATE_FORMAT}-") for n in names)
    assert any(p.name.startswith(f"v{PROGRESS.current}-") for p in PROGRESSES)


@pytest.mark.parametrize("path", RUN_STATES, ids=lambda p: p.name)
def test_stored_run_state_is_read_as_todays_state_when_written_by_a_released_version(path: Path) -> None:
    raw = path.read_bytes().strip()
    state = load_state(raw)

    assert state.stateFormat == STATE_FORMAT
    assert state.status == "waiting_for_approval"
    assert "tool-call-031" in state.toolCalls and state.open_approvals()
    # written again, it is today's shape and reads back as the same state
    again, _ = dump_state(state)
    assert again.startswith(RUN_STATE.prefix)
    assert load_state(again) == state
    if "before-settledCalls" in path.name:  # that code kept every call whole
        assert state.settledCalls == {} and len(state.toolCalls) == 36
    else:  # compacted calls keep how they ended and their argsHash prefix, as pairs
        assert len(state.settledCalls) == 3 and len(state.toolCalls) == 33
        how, args = state.settledCalls["call-00000"]
        assert how == "completed/confirmed_success"
        assert state.toolCalls.get("call-00000") is None and len(args) == 16


def test_joined_settled_call_is_split_at_its_last_colon_when_migrated() -> None:
    raw = (GOLDEN / "run-state" / "v1-e384e4b-settledCalls-joined.json").read_bytes()
    before = json.loads(raw)["settledCalls"]
    after = load_state(raw).settledCalls

    assert {k: ":".join(v) for k, v in after.items()} == before


@pytest.mark.parametrize("path", [p for p in RUN_STATES if p.name.startswith(("v1-", "v2-"))], ids=lambda p: p.name)
def test_dedupe_window_keeps_every_command_in_order_when_ids_are_migrated_to_digests(path: Path) -> None:
    ids = json.loads(path.read_bytes())["recentCommands"]
    state = load_state(path.read_bytes())

    assert 0 < len(ids) <= DEDUPE_WINDOW
    assert state.recentCommandDigests == "".join(map(command_digest, ids))
    assert len(state.recentCommandDigests) == len(ids) * DIGEST_CHARS
    assert all(state.seen(c) for c in ids) and not state.seen("cmd-never-sent")


def test_old_run_state_fails_validation_when_read_without_the_migration() -> None:
    """Why the table exists: the joined shape is not today's RunState."""
    raw = (GOLDEN / "run-state" / "v1-e384e4b-settledCalls-joined.json").read_bytes()
    with pytest.raises(ValueError, match="settledCalls"):
        RunState.model_validate_json(raw)


def test_run_state_is_refused_naming_the_fix_when_a_newer_runfacts_wrote_it() -> None:
    value = json.loads(next((GOLDEN / "run-state").glob(f"v{STATE_FORMAT}-*.json")).read_bytes())
    value[FIELD] = STATE_FORMAT + 1
    with pytest.raises(NewerStoredVersion, match=f"stateFormat={STATE_FORMAT + 1}.*upgrade this process"):
        load_state(json.dumps(value).encode())


@pytest.mark.parametrize("bad", [b'{"stateFormat":"2"}', b'{"stateFormat":0}', b"[1]", b"{not json"])
def test_run_state_is_refused_when_its_version_is_not_a_version(bad: bytes) -> None:
    with pytest.raises(StoredVersionError, match="stored run state record"):
        load_state(bad)


@pytest.mark.parametrize("path", PROGRESSES, ids=lambda p: p.name)
def test_stored_progress_is_read_when_written_by_a_released_version(path: Path) -> None:
    progress = load_progress(path.read_bytes().strip())

    assert progress == Progress(toolCallId="call-00007", correlationId="run-20260727001", phase="reconciling",
                                attempt=2, tries=3, firstTryMs=1_785_141_601_000, lookups=1,
                                deadlineMs=1_785_141_901_000, reportedStill=True)
    assert progress.model_dump_json().encode().startswith(PROGRESS.prefix)


def test_progress_is_refused_when_a_newer_runfacts_wrote_it() -> None:
    with pytest.raises(NewerStoredVersion, match="dispatcher progress"):
        load_progress(b'{"stateFormat":%d,"toolCallId":"c","correlationId":"r"}' % (PROGRESS.current + 1))


def _timers(entries: list[tuple[str, str]]) -> Timers:
    backend = MemoryBackend([TIMER_STORE])
    backend.write({TIMER_STORE: {bytes.fromhex(k): bytes.fromhex(v) for k, v in entries}}, {})
    return Timers(PartitionState(backend, [TIMER_STORE]))


def test_stored_timer_index_fires_in_due_order_when_written_by_a_released_version() -> None:
    timers = _timers(json.loads((GOLDEN / "timers" / "v1-8203370.json").read_text()))

    assert timers.next_due() == 1_785_141_600_500
    fired = timers.pop_due(1_785_141_700_000, 10)
    assert [(k, t, d, p) for k, t, d, p in fired] == [
        (b"run-b", "reconcile:call-00007", 1_785_141_600_500, b""),
        (b"run-a", "approval-expiry:approval-1", 1_785_141_601_000, b"approval_expiry|approval-1"),
        (b"run-a", "claim-deadline:call-00001", 1_785_141_603_000, b"claim_deadline|call-00001"),
    ]


def test_timer_index_is_refused_when_a_newer_layout_wrote_it() -> None:
    timers = _timers([("76", str(TIMER_FORMAT + 1).encode().hex())])
    with pytest.raises(NewerStoredVersion, match="timer index.*upgrade this process"):
        timers.next_due()


def test_stored_user_view_decodes_when_written_by_a_released_version() -> None:
    """Views carry their schema's version in their framing (projections.records): a record of an
    unknown version is refused by `decode`, not misread."""
    raw = bytes.fromhex((GOLDEN / "views" / "user-view-v1-8203370.hex").read_text().strip())
    view = user_view.schema().decode(raw)

    assert view["runId"] == "run-20260727001" and view["status"] == "waiting_for_approval"
    with pytest.raises(InvalidInput, match="not a"):
        user_view.schema().decode(raw[:2] + bytes(8) + raw[10:])


def test_dashboard_reads_a_run_state_record_of_the_joined_shape_when_the_topic_holds_one() -> None:
    """The dashboard and the CLI (`ops.client.StateReader`) decode run-state records with
    `load_state` too: an old record on the compacted topic is shown, not an error."""
    from runfacts.dashboard.feed import decode_state

    raw = (GOLDEN / "run-state" / "v1-e384e4b-settledCalls-joined.json").read_bytes()
    assert decode_state(raw) == load_state(raw)
    assert decode_state(raw).settledCalls["call-00001"][0] == "completed/confirmed_success"

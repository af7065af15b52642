"""Every released shape of every stored record is read by today's code (issue 18.3).

The fixtures in golden-state/ were written by golden-state/make_run_state.py from the code of
the commit in each file's name (`git archive <commit>`): run states before `settledCalls`
(1a16857), with ':'-joined `settledCalls` (e384e4b), with pairs but no version marker (8203370),
marked (`stateFormat` 2, the dedupe window as command ids), with the window as digests
(`stateFormat` 3), with an approval's requesters (`stateFormat` 4, c84833a), with child runs
(`stateFormat` 5: written by migrating the v4 fixture and adding a child, a reservation and an
evidence item), with compensation plans (`stateFormat` 6) and with a call's hold (`stateFormat`
7, a paused capability); dispatcher progress before and after `polls`, marked, and with
`throttles` (format 3); the timer index; the user view. A record newer than this code knows is
refused, naming the fix.

Each stored kind's field set per version is recorded in golden-state/shapes.json: a shape that
changes without a version bump (and a fixture of the old shape) fails here, saying what to do.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from runfacts.processors.decider.state import DEDUPE_WINDOW, DIGEST_CHARS, STATE_FORMAT, RunState, command_digest
from runfacts.processors.decider.state_json import RUN_STATE, dump_state, load_state
from runfacts.processors.dispatcher.core import PROGRESS, Progress, load_progress
from runfacts.processors.engine.api import TIMER_STORE
from runfacts.processors.engine.store import MemoryBackend, PartitionState
from runfacts.processors.engine.timers import TIMER_FORMAT, Timers
from runfacts.processors.engine.versions import (
    FIELD,
    Migrations,
    NewerStoredVersion,
    StoredVersionError,
    shape_drift,
    shape_of,
)
from runfacts.projections import user_view
from runfacts.schemas.common import BudgetAmounts
from runfacts.schemas.errors import InvalidInput

GOLDEN = Path(__file__).parent / "golden-state"
RUN_STATES = sorted((GOLDEN / "run-state").glob("*.json"))
SHAPES = json.loads((GOLDEN / "shapes.json").read_text())
STORED = [(RUN_STATE, RunState, "run-state", "STATE_FORMAT in processors/decider/state.py"),
          (PROGRESS, Progress, "progress", "PROGRESS_FORMAT in processors/dispatcher/core.py")]
"""Every stored JSON record kind: its migrations, its model, its fixtures' folder, where its version is."""
RECORD = "cd tests/contract/golden-state && ../../../.venv/bin/python make_run_state.py --record-shapes"
PROGRESSES = sorted((GOLDEN / "progress").glob("*.json"))


def test_every_shape_has_a_fixture_when_the_golden_folder_is_listed() -> None:
    names = [p.name for p in RUN_STATES]
    assert any("before-settledCalls" in n for n in names)
    assert any("settledCalls-joined" in n for n in names)
    assert any(n.startswith("v2-") for n in names)  # the window as ids
    assert any(n.startswith(f"v{STATE_FORMAT}-") for n in names)
    assert any(p.name.startswith(f"v{PROGRESS.current}-") for p in PROGRESSES)


@pytest.mark.parametrize(("migrations", "model", "folder", "where"), STORED, ids=lambda v: getattr(v, "kind", ""))
def test_stored_shape_is_the_recorded_one_when_its_version_was_not_bumped(
        migrations: Migrations, model: type, folder: str, where: str) -> None:
    """A field added, removed or retyped in a stored record needs a new version: old records lack
    it (and a newer runfacts' records must be refused by this one, not misread)."""
    recorded = SHAPES[migrations.kind].get(str(migrations.current))
    assert recorded is not None, (
        f"{migrations.kind} version {migrations.current} has no recorded shape: record it with `{RECORD}` "
        f"(and keep a golden fixture of version {migrations.current - 1} in golden-state/{folder}/)")
    drift = shape_drift(recorded, shape_of(model))
    assert not drift, (
        f"the stored {migrations.kind} changed shape without a version bump ({'; '.join(drift)}). Records "
        f"stored before lack it, so: 1. bump {where} to {migrations.current + 1}; 2. add the migration "
        f"step {migrations.current} -> {migrations.current + 1} (an upcaster that rebuilds what an old record "
        f"lacks; the identity only when a default IS the old meaning); 3. write a golden fixture of version "
        f"{migrations.current} into golden-state/{folder}/ from the commit before the change (make_run_state.py); "
        f"4. record the new shape: `{RECORD}`")


@pytest.mark.parametrize(("migrations", "folder"), [(m, f) for m, _, f, _ in STORED],
                         ids=lambda v: getattr(v, "kind", ""))
def test_every_recorded_version_has_a_golden_fixture_when_shapes_are_recorded(migrations: Migrations,
                                                                             folder: str) -> None:
    for version in SHAPES[migrations.kind]:
        assert list((GOLDEN / folder).glob(f"v{version}-*.json")), (
            f"{migrations.kind} version {version} has a recorded shape but no fixture golden-state/{folder}/"
            f"v{version}-*.json: write one with make_run_state.py from the tree of that version")


def test_shape_drift_names_the_field_when_a_stored_model_gains_one() -> None:
    """What the guard above reports, on a model that gained a defaulted field (as `evidence` did)."""
    from pydantic import BaseModel

    class Before(BaseModel):
        runId: str

    class After(BaseModel):
        runId: str
        evidence: tuple[str, ...] = ()

    before, after = {"RunState": shape_of(Before)["Before"]}, {"RunState": shape_of(After)["After"]}
    assert shape_drift(before, after) == ["RunState.evidence added (tuple[str, ...])"]
    assert shape_drift(after, before) == ["RunState.evidence removed"]


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
    """The dashboard and the CLI (`runfacts.client.reader.StateReader`) decode run-state records with
    `load_state` too: an old record on the compacted topic is shown, not an error."""
    from runfacts.dashboard.feed import decode_state

    raw = (GOLDEN / "run-state" / "v1-e384e4b-settledCalls-joined.json").read_bytes()
    assert decode_state(raw) == load_state(raw)
    assert decode_state(raw).settledCalls["call-00001"][0] == "completed/confirmed_success"


def _scripted_run_log() -> list:
    """The run make_run_state.py scripts (every run-state fixture holds it), folded by today's code."""
    import decider_support as support

    from runfacts.processors.policy import retry
    from runfacts.schemas import commands as cmd
    from runfacts.schemas.common import BudgetAmounts

    saved = support._ids, support._clock["now"]
    support._ids, support._clock["now"] = itertools.count(1), support.T0  # as in make_run_state's fresh process
    try:
        return _script(support, retry, cmd, BudgetAmounts)
    finally:
        support._ids, support._clock["now"] = saved


def _script(support, retry, cmd, BudgetAmounts) -> list:  # type: ignore[no-untyped-def]  # noqa: N803
    s = support.Scenario().given(support.create(BudgetAmounts(toolCalls=1000, steps=1000)))
    for i in range(35):
        call, target = f"call-{i:05d}", f"order-{i:05d}"
        args = retry.args_hash({"orderId": target})
        s.given(support.command(cmd.ProposeToolCall, toolCallId=call, capabilityId="orders.lookup", argsHash=args,
                                argsRef=f"args/{i}", target=target, action="lookup", risk="low",
                                summary=f"look up {target}"),
                support.claim(call, key=retry.idempotency_key(support.RUN, "lookup", target, args)),
                support.completed(call),
                support.command(cmd.ReportVerification, support.DISPATCHER, toolCallId=call,
                                status="confirmed_success"))
    s.given(support.propose_refund())
    return [s.s, s.log]


def test_run_state_stored_before_evidence_gets_it_back_and_the_same_state_hash_when_its_events_are_read() -> None:
    """`evidence` was added at version 2 without a bump (e740ec1): a run in flight across that upgrade
    restarted with it empty, and its next checkpoint's stateHash differed from a replay's. The decider
    rebuilds it from the run's events (`history.EventHistory`) the first time it loads such a record."""
    from runfacts.processors.decider.context import state_hash
    from runfacts.processors.decider.state_json import lacks_evidence, with_evidence

    replayed, log = _scripted_run_log()
    old = (GOLDEN / "run-state" / "v2-marked.json").read_bytes().strip()
    assert lacks_evidence(old) and len(replayed.evidence) > 100
    assert load_state(old).evidence == ()  # read as it is: the window is lost
    rebuilt = with_evidence(load_state(old), [(e.eventId, e.eventType) for e in log])

    assert rebuilt == replayed and state_hash(rebuilt) == state_hash(replayed)
    # the scripted run's newest fixture (v5-children is another run: a parent with a child)
    assert rebuilt == load_state((GOLDEN / "run-state" / "v4-requesters.json").read_bytes())
    assert not any(lacks_evidence(p.read_bytes()) for p in RUN_STATES if p.name.startswith(("v3-", "v4-")))
    assert all(lacks_evidence(p.read_bytes()) for p in RUN_STATES if p.name.startswith("v1-"))


def test_run_state_of_format_4_reads_with_no_parent_no_children_and_an_empty_ledger_when_migrated() -> None:
    """4 -> 5 (child runs, docs/decisions/0012-child-runs.md): nothing reserved, nothing to merge."""
    raw = (GOLDEN / "run-state" / "v4-requesters.json").read_bytes()
    assert json.loads(raw)["stateFormat"] == 4 and "children" not in json.loads(raw)
    state = load_state(raw)

    assert state.parentRunId is None and state.children == {} and state.evidenceItems == {}
    assert state.budget.reserved == BudgetAmounts()


def test_run_state_of_format_5_keeps_children_reservations_and_ledger_when_read_back() -> None:
    state = load_state((GOLDEN / "run-state" / "v5-children.json").read_bytes())

    assert state.children["run-child-7"].live and state.budget.reserved.toolCalls == 1
    assert state.evidenceItems["ev-1"].by == state.runId

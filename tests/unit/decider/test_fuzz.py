"""Hypothesis fuzz of the run decider's shell (broker-free): every bad input ends typed.

Bad bytes, truncated Avro, a wrong fingerprint, a future schemaVersion, oversize values and
invalid commands each end as a `command.rejected` with a reason or ONE dead letter with
readable reason headers; the shell keeps running; records in = processed + rejected +
dead-lettered + deduplicated. 10^4 cases here (RUNFACTS_FUZZ_SCALE=10 for 10^5: `make fuzz`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta

from hypothesis import given
from hypothesis import strategies as st

from runfacts.dev.crash.workload import USER, Commands, Input, refund_story, ticking, valid
from runfacts.processors.decider.app import InputLimits
from runfacts.processors.decider.core import decide
from runfacts.schemas import codec
from runfacts.schemas import commands as cmd
from runfacts.schemas.catalog import default_catalog
from runfacts.schemas.common import Actor

from .fuzz_support import T0, Outcome, Probe, fuzz_settings, mutated_command

RUN = "fz-run"
STORY = refund_story(Commands("pool", ticking(T0)), RUN)
SETUP = STORY[:3]  # create, reasoning, propose: the run waits for approval
POOL = [valid(c) for c in STORY]
CATALOG = default_catalog()
FINGERPRINTS = {e.fingerprint for e in CATALOG.entries}
LIMITS = InputLimits()
EXPECTED = {
    "truncated": "", "wrong_fingerprint": "unknown fingerprint", "future_version": "newer than this code knows",
    "version_field": "disagrees with the writer schema", "tombstone": "tombstone", "event": "is an event",
    "wrong_key": "is not the command's runId",
}


def _event_bytes() -> bytes:
    from runfacts.workers import decide_context

    return codec.encode(decide(STORY[0], None, decide_context())[0])


EVENT = _event_bytes()


@st.composite
def bad_record(draw: st.DrawFn) -> tuple[str, Input]:
    kind = draw(st.sampled_from(["random", "truncated", "wrong_fingerprint", "future_version",
                                 "version_field", "mutated", "tombstone", "event", "wrong_key"]))
    base = draw(st.sampled_from(POOL))
    data, key, headers = base.value or b"", base.key, ()
    if kind == "random":
        data = draw(st.sampled_from([b"", b"\xc3\x01", b"\x00"])) + draw(st.binary(max_size=1024))
    elif kind == "truncated":
        data = data[:draw(st.integers(0, len(data) - 1))]
    elif kind == "wrong_fingerprint":
        fingerprint = draw(st.binary(min_size=8, max_size=8).filter(lambda f: f not in FINGERPRINTS))
        data = data[:2] + fingerprint + data[10:]
    elif kind == "future_version":
        command_type = dict(base.headers)["commandType"]
        newer = CATALOG.by_type[command_type.decode()].version + draw(st.integers(1, 50))
        data = data[:2] + draw(st.binary(min_size=8, max_size=8).filter(lambda f: f not in FINGERPRINTS)) + data[10:]
        headers = (("commandType", command_type), ("schemaVersion", str(newer).encode()))
    elif kind == "version_field":
        values = codec.default_codec().decode_dict(data)
        other = draw(st.integers(1, 99).filter(lambda v: v != values["schemaVersion"]))
        data = codec.default_codec().encode_dict({**values, "schemaVersion": other})
    elif kind == "mutated":
        data = _mutate(draw, bytearray(data))
    elif kind == "event":
        data = EVENT
    elif kind == "wrong_key":
        key = draw(st.binary(min_size=1, max_size=24).filter(lambda k: k != base.key))
    return kind, Input(key, None if kind == "tombstone" else data, headers, kind)


def _mutate(draw: st.DrawFn, data: bytearray) -> bytes:
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        how = draw(st.sampled_from(["flip", "insert", "delete"]))
        if how == "flip" and data:
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif how == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        else:
            del data[at:at + draw(st.integers(1, 8))]
    return bytes(data)


@fuzz_settings(4_000)
@given(bad_record())
def test_record_ends_dead_lettered_with_readable_reason_when_bytes_are_bad(case: tuple[str, Input]) -> None:
    kind, record = case
    probe = Probe().given(*SETUP)
    outcome = probe.feed(record)
    if kind in EXPECTED:
        assert outcome.kind == "dead_lettered" and EXPECTED[kind] in outcome.reason, (kind, outcome)
    probe.still_running()
    probe.balanced()


TIMER_ACTOR = Actor(subjectId="run-decider", roles=("decider",), authSource="decider-timer")
CALL = f"call-{RUN}"
DECISIONS = st.sampled_from(["approve", "reject"])
Trouble = Callable[[Probe, list, st.DataObject], tuple[str, Outcome]]  # -> (expected reason, outcome)


def _unknown_approval(probe: Probe, story: list, data: st.DataObject) -> tuple[str, Outcome]:
    # an id of the contract's alphabet (runfacts.ids); others are dead-lettered before the decider
    ids = st.from_regex(r"[A-Za-z0-9._:-]{1,60}", fullmatch=True)
    approval = data.draw(ids.filter(lambda a: a != f"approval-{CALL}"))
    probe.given(*story[:3])
    return "unknown_approval", probe.feed(probe.commands.resume(RUN, CALL, approval=approval))


def _double_resume(probe: Probe, story: list, data: st.DataObject) -> tuple[str, Outcome]:
    probe.given(*story[:4])
    return "approval_already_decided", probe.feed(probe.commands.resume(RUN, CALL, data.draw(DECISIONS)))


def _stale_version(probe: Probe, story: list, data: st.DataObject) -> tuple[str, Outcome]:
    probe.given(*story[:data.draw(st.integers(1, 6))])
    version = json.loads(probe.driver.read_store("runs")[RUN.encode()])["version"]
    expected = data.draw(st.integers(-1, 40).filter(lambda v: v != version))
    return "stale_version", probe.feed(probe.commands.make(cmd.CancelRun, RUN, USER, expected=expected, reason="x"))


def _approval_after_cancel(probe: Probe, story: list, data: st.DataObject) -> tuple[str, Outcome]:
    probe.given(*story[:3], probe.commands.cancel(RUN))
    return "run_cancelled", probe.feed(probe.commands.resume(RUN, CALL, data.draw(DECISIONS)))


def _retry_result_unknown(probe: Probe, story: list, data: st.DataObject) -> tuple[str, Outcome]:
    probe.given(*story[:6])
    return "result_unknown_needs_reconciliation", probe.feed(probe.commands.retry(RUN, CALL))


def _redelivery(probe: Probe, story: list, data: st.DataObject) -> tuple[str, Outcome]:
    upto = data.draw(st.integers(1, len(story)))
    probe.given(*story[:upto])
    outcome = probe.feed(story[upto - 1])
    assert outcome.kind == "deduplicated", outcome
    return "", outcome


def _forged_timer(probe: Probe, story: list, data: st.DataObject) -> tuple[str, Outcome]:
    probe.given(*story[:data.draw(st.integers(1, 8))])
    kind = data.draw(st.sampled_from(["approval_expiry", "reconciliation_deadline", "wall_budget"]))
    target = data.draw(st.sampled_from([f"approval-{CALL}", CALL, RUN]))
    due = T0 + timedelta(days=data.draw(st.integers(0, 400)))
    outcome = probe.feed(probe.commands.make(cmd.FireTimer, RUN, TIMER_ACTOR, timerId=f"{kind}:{target}", kind=kind,
                                             targetId=target, dueAt=due))
    assert outcome.kind == "dead_lettered" and "timer.fire is internal" in outcome.reason, outcome
    return "", outcome


def _mutated(probe: Probe, story: list, data: st.DataObject) -> tuple[str, Outcome]:
    upto = data.draw(st.integers(1, len(story) - 1))
    probe.given(*story[:upto])
    return "", probe.feed(data.draw(mutated_command(data.draw(st.sampled_from(story[upto:])))))


TROUBLES: dict[str, Trouble] = {
    "unknown_approval": _unknown_approval, "double_resume": _double_resume, "stale_version": _stale_version,
    "approval_after_cancel": _approval_after_cancel, "retry_result_unknown": _retry_result_unknown,
    "redelivery": _redelivery, "forged_timer": _forged_timer, "mutated": _mutated,
}


@fuzz_settings(4_000)
@given(st.sampled_from(sorted(TROUBLES)), st.data())
def test_invalid_command_ends_rejected_with_reason_when_state_forbids_it(trouble: str, data: st.DataObject) -> None:
    probe = Probe()
    reason, outcome = TROUBLES[trouble](probe, refund_story(probe.commands, RUN), data)
    if reason:
        assert (outcome.kind, outcome.reason) == ("rejected", reason), (trouble, outcome)
    probe.still_running()
    probe.balanced()


@st.composite
def oversized(draw: st.DrawFn) -> tuple[str, cmd.CreateRun | cmd.RecordReasoning]:
    c = Commands("big", ticking(T0))
    char = draw(st.characters(codec="utf-8", exclude_categories=("Cs",)))
    how = draw(st.sampled_from(["text", "items", "record", "at_limit"]))
    if how == "text":
        return "characters|bytes (limit", c.create(RUN).model_copy(update={"payload": STORY[0].payload.model_copy(
            update={"goalSummary": char * draw(st.integers(LIMITS.max_text_chars + 1, 5 * LIMITS.max_text_chars))})})
    refs: tuple[str, ...]
    if how == "items":
        refs = (char,) * draw(st.integers(LIMITS.max_items + 1, 3 * LIMITS.max_items))
    elif how == "record":
        size = draw(st.integers(LIMITS.max_text_chars // 2, LIMITS.max_text_chars))
        refs = ("r" * size,) * (LIMITS.max_record_bytes // size + draw(st.integers(1, 20)))
    else:
        refs = ("r" * LIMITS.max_text_chars,) * draw(st.integers(1, 8))
    reasoning = c.reasoning(RUN, draw(st.integers(1, 1000)))
    expect = {"items": "items", "record": "bytes (limit", "at_limit": ""}[how]
    return expect, reasoning.model_copy(update={"payload": reasoning.payload.model_copy(update={"evidenceRefs": refs})})


@fuzz_settings(2_000)
@given(oversized())
def test_oversized_command_is_dead_lettered_before_run_state_when_over_a_limit(case: tuple[str, object]) -> None:
    expect, command = case
    probe = Probe() if isinstance(command, cmd.CreateRun) else Probe().given(STORY[0])
    before = probe.driver.read_store("runs")
    outcome = probe.feed(command)  # type: ignore[arg-type]
    if expect:
        assert outcome.kind == "dead_lettered" and outcome.reason.startswith("oversized: "), outcome.reason[:200]
        assert any(e in outcome.reason for e in expect.split("|")), outcome.reason[:200]
        assert probe.driver.read_store("runs") == before
    else:
        assert outcome.kind == "processed", outcome
    probe.still_running()
    probe.balanced()

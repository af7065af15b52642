"""The crash matrix's oracle, checked against the decider shell on the broker-free test driver.

The shell's own outputs must satisfy the oracle; each kind of damage a crash could do (a
lost event, a duplicate, a stale state, a lost dead letter, a second refund) must be named.
"""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

from runfacts.dev.crash.oracle import Expected, expect, ledger_problems, verdict
from runfacts.dev.crash.workload import Commands, ticking, valid, workload
from runfacts.logread import LogRecord
from runfacts.processors.decider.app import DeciderShell
from runfacts.processors.engine.testdriver import TestDriver
from runfacts.projections.user_view import publisher
from runfacts.schemas import codec
from runfacts.schemas import events as ev
from runfacts.schemas.common import EventBase
from runfacts.schemas.models import decode_event

from ..decider.fuzz_support import NAMES, SHELL, T0, T0_MS

VIEWS = DeciderShell(NAMES, SHELL.ctx, views=(publisher(NAMES.user_view),)).application()


def _played(runs: int = 3) -> tuple[list[LogRecord], dict[str, list[LogRecord]]]:
    """The workload as a commands log, and what the shell made of it (events, state, views, dlq)."""
    driver = TestDriver(VIEWS, start_ms=T0_MS)
    log = []
    for offset, item in enumerate(workload("or", runs, ticking(T0))):
        driver.pipe(NAMES.commands, item.value, item.key, headers=list(item.headers) or None)
        log.append(LogRecord(NAMES.commands, 0, offset, item.key, item.value, item.headers, T0_MS))
    out = {t: [LogRecord(t, 0, r.offset, r.key, r.value, tuple(r.headers or ()), T0_MS)
               for r in driver.outputs(t)] for t in (NAMES.events, NAMES.state, NAMES.dlq, NAMES.user_view)}
    return log, out


def _judge(log: list[LogRecord], out: dict[str, list[LogRecord]], **kw: bool):
    return verdict(expect(log, SHELL), out[NAMES.events], out[NAMES.state], out[NAMES.dlq], NAMES.commands,
                   views=out[NAMES.user_view], publish=publisher(NAMES.user_view), **kw)


def test_verdict_passes_when_topics_hold_what_the_shell_produced() -> None:
    log, out = _played()
    result = _judge(log, out)
    assert result.ok, result.problems
    n = result.numbers
    assert n["in"] == len(log) == n["processed"] + n["rejected"] + n["dead_lettered"] + n["deduplicated"]
    assert n["rejected"] > 0 and n["dead_lettered"] > 0 and n["deduplicated"] > 0


def test_verdict_names_the_gap_when_an_event_is_missing() -> None:
    log, out = _played()
    lost = out[NAMES.events].pop(5)
    problems = _judge(log, out).problems
    assert any("first difference at" in p for p in problems), problems
    assert lost.key is not None and any(lost.key.decode() in p for p in problems)


def test_verdict_flags_a_duplicate_event_when_exactly_once_is_claimed() -> None:
    log, out = _played()
    out[NAMES.events].append(out[NAMES.events][3])
    assert "1 duplicate event(s) under exactly-once" in _judge(log, out).problems
    tolerant = _judge(log, out, allow_duplicates=True)
    assert tolerant.ok and tolerant.numbers["duplicate_events"] == 1


def test_verdict_flags_a_repeat_with_other_bytes_when_duplicates_are_allowed() -> None:
    log, out = _played()
    first = out[NAMES.events][3]
    from runfacts.schemas import codec

    event = codec.decode(first.value or b"")
    changed = event.model_copy(update={"correlationId": "tampered"})
    out[NAMES.events].append(replace(first, value=codec.encode(changed)))
    problems = _judge(log, out, allow_duplicates=True).problems
    assert any("repeated with different bytes" in p for p in problems), problems


def test_verdict_names_the_run_when_its_last_state_is_stale() -> None:
    log, out = _played()
    stale = out[NAMES.state].pop()
    problems = _judge(log, out).problems
    assert any(p.startswith(f"{stale.key.decode()}: last run.state") for p in problems), problems  # type: ignore[union-attr]


def test_verdict_names_the_run_when_its_last_user_view_is_stale() -> None:
    log, out = _played()
    stale = out[NAMES.user_view].pop()
    problems = _judge(log, out).problems
    assert problems == [f"{stale.key.decode()}: last user view differs from the view of the oracle state"]  # type: ignore[union-attr]


def test_counts_do_not_balance_when_a_dead_letter_is_lost() -> None:
    log, out = _played()
    out[NAMES.dlq].pop()
    problems = _judge(log, out).problems
    assert any("dead letters" in p for p in problems) and any("do not balance" in p for p in problems)


def _refund_state(key: str) -> Expected:
    call = SimpleNamespace(toolCallId="c1", idempotencyKey=key, execution="completed", capabilityId="payments.refund")
    authorized = ev.ToolCallAuthorized(eventId="e1", runId="r1", producer="test", correlationId="x",
                                       occurredAt=T0, payload=ev.ToolCallAuthorizedPayload(toolCallId="c1",
                                                                                         argsHash="h"))
    return Expected(events={"r1": [authorized]}, states={"r1": SimpleNamespace(toolCalls={"c1": call})})  # type: ignore[dict-item]


def test_ledger_problems_name_the_call_when_it_was_refunded_twice_or_not_at_all() -> None:
    refund = SimpleNamespace(idempotency_key="refund:k1")
    assert ledger_problems(_refund_state("refund:k1"), [refund]) == []
    assert ledger_problems(_refund_state("refund:k1"), [refund, refund]) == ["r1/c1: 2 refunds in the ledger"]
    assert ledger_problems(_refund_state("refund:k1"), []) == ["r1/c1: 0 refunds in the ledger"]
    stray = SimpleNamespace(idempotency_key="refund:other")
    assert ledger_problems(_refund_state("refund:k1"), [refund, stray]) == [
        "refunds without an authorized call: ['refund:other']"]


def _approval_expired_by_timer() -> tuple[list[LogRecord], dict[str, list[LogRecord]]]:
    """One run waits for an approval; the driver's clock passes its expiry, so the decider's
    timer fires (a `timer.fire` that never reaches the commands log)."""
    c = Commands("tm", ticking(T0))
    driver = TestDriver(VIEWS, start_ms=T0_MS)
    log = []
    for offset, command in enumerate((c.create("tm-run"), c.propose("tm-run", "call-tm"))):
        item = valid(command)
        driver.pipe(NAMES.commands, item.value, item.key, headers=list(item.headers) or None)
        log.append(LogRecord(NAMES.commands, 0, offset, item.key, item.value, item.headers, T0_MS))
    driver.advance(16 * 60_000)  # past the refund approval's 15-minute TTL
    out = {t: [LogRecord(t, 0, r.offset, r.key, r.value, tuple(r.headers or ()), T0_MS)
               for r in driver.outputs(t)] for t in (NAMES.events, NAMES.state, NAMES.dlq, NAMES.user_view)}
    return log, out


def test_oracle_folds_a_timer_fire_where_the_events_log_shows_it() -> None:
    log, out = _approval_expired_by_timer()
    assert any(e.eventType == "approval.expired" for e in _decoded(out[NAMES.events]))
    without = _judge(log, out)  # the plain fold knows no timers: the expiry is unexplained
    assert not without.ok
    result = verdict(expect(log, SHELL, out[NAMES.events]), out[NAMES.events], out[NAMES.state], out[NAMES.dlq],
                     NAMES.commands, views=out[NAMES.user_view], publish=publisher(NAMES.user_view))
    assert result.ok, result.problems
    assert result.numbers["timers_fired"] == 1 and result.numbers["in"] == 2


def test_oracle_names_a_timer_fire_the_state_never_wanted() -> None:
    log, out = _approval_expired_by_timer()
    # the proposal and what it decided are gone, yet an expiry of its approval fired
    decoded = zip(out[NAMES.events], _decoded(out[NAMES.events]), strict=True)
    events = [r for r, e in decoded if e.causationId != "tm-c2"]
    problems = verdict(expect(log[:1], SHELL, events), events, out[NAMES.state], out[NAMES.dlq],
                       NAMES.commands).problems
    assert any("timer timer:expiry:" in p and "fired, but the state wants None" in p for p in problems), problems


def _decoded(records: list[LogRecord]) -> list[EventBase]:
    return [decode_event(codec.default_codec(), r.value) for r in records]


def test_oracle_refuses_a_run_on_a_version_its_partition_drained_as_the_shell_does() -> None:
    from runfacts.dev.crash.workload import OPERATOR
    from runfacts.ops.control import Issue, drain_commands
    from runfacts.processors.decider.context import DEFAULT_VERSIONS

    c = Commands("dr", ticking(T0))
    drain = drain_commands("stateSchema", DEFAULT_VERSIONS.stateSchema, 1, Issue(OPERATOR, "dr-drain", T0))[0]
    driver = TestDriver(VIEWS, start_ms=T0_MS)
    log = []
    for offset, command in enumerate((c.create("dr-before"), drain, c.create("dr-after"))):
        item = valid(command)
        driver.pipe(NAMES.commands, item.value, item.key, headers=list(item.headers) or None)
        log.append(LogRecord(NAMES.commands, 0, offset, item.key, item.value, item.headers, T0_MS))
    out = {t: [LogRecord(t, 0, r.offset, r.key, r.value, tuple(r.headers or ()), T0_MS)
               for r in driver.outputs(t)] for t in (NAMES.events, NAMES.state, NAMES.dlq, NAMES.user_view)}
    refused = [e for e in _decoded(out[NAMES.events]) if e.eventType == "command.rejected"]
    assert [(e.runId, e.payload.reasonCode) for e in refused] == [("dr-after", "version_draining")]  # the shell
    result = _judge(log, out)
    assert result.ok, result.problems  # the oracle expects the same refusal (it did not know drains)

"""`audit verify` names the first broken link by its own sequence (issue 33 item 7): an
unreadable event by the sequence its record would have, an unreadable record by its place in
the stored chain, and the first finding in chain order whichever side was read ahead."""

from __future__ import annotations

from projection_support import audit_records, facts_of, run_values

from runfacts.projections.audit import reducer as audit
from runfacts.projections.audit.check import ChainCheck
from runfacts.projections.facts import ReadSettings

READ = ReadSettings(decode=False)


def _log():
    events = run_values(seed=9, runs=2)
    facts = facts_of(events, READ)
    return events, facts, audit_records(facts)


def _sequence_of(events: list[dict], index: int) -> int:
    run = events[index]["runId"]
    return sum(1 for e in events[:index + 1] if e["runId"] == run)


def _target(events: list[dict], minimum: int = 3) -> int:
    """An event of the first run that is at least its `minimum`-th."""
    run = events[0]["runId"]
    return next(i for i in range(len(events)) if events[i]["runId"] == run and _sequence_of(events, i) >= minimum)


def test_unreadable_event_is_named_by_its_own_sequence_when_events_are_read_ahead() -> None:
    events, facts, stored = _log()
    target = _target(events, 4)
    check = ChainCheck()
    for i, fact in enumerate(facts):  # the events batch first, as `audit verify` reads them
        if i == target:
            check.unreadable(events[i]["runId"], f"runfacts.run.events[0]@{i}", "event cannot be read: bad bytes")
        else:
            check.expected(fact)
    for offset, body in enumerate(stored):
        check.stored(body, f"runfacts.audit[0]@{offset}")
    (finding,) = [f for f in check.finish() if f.runId == events[target]["runId"]]
    assert (finding.kind, finding.sequence) == ("unreadable", _sequence_of(events, target))
    assert f"seq {_sequence_of(events, target)}: unreadable at runfacts.run.events[0]@{target}" in str(finding)


def test_unreadable_record_is_named_by_its_place_in_the_chain_when_records_come_after_events() -> None:
    events, facts, stored = _log()
    target = _target(events, 3)
    check = ChainCheck()
    for fact in facts:
        check.expected(fact)
    for offset, body in enumerate(stored):
        if offset == target:
            check.unreadable(events[offset]["runId"], f"runfacts.audit[0]@{offset}", "not an AuditRecord v1",
                             record=True)
        else:
            check.stored(body, f"runfacts.audit[0]@{offset}")
    (finding,) = [f for f in check.finish() if f.runId == events[target]["runId"]]
    assert (finding.kind, finding.sequence) == ("unreadable", audit.decode(stored[target]).sequence)


def test_first_finding_is_the_first_link_in_chain_order_when_the_audit_is_read_ahead() -> None:
    events, facts, stored = _log()
    early, late = _target(events, 2), _target(events, 5)
    run = events[early]["runId"]
    record = audit.decode(stored[late])
    stored[late] = audit.encode(record._replace(event=record.event._replace(producer="someone-else")))  # broken
    check = ChainCheck()
    for offset, body in enumerate(stored):  # every record before any event
        check.stored(body, f"runfacts.audit[0]@{offset}")
    for i, fact in enumerate(facts):
        if i == early:
            check.unreadable(run, f"runfacts.run.events[0]@{i}", "event cannot be read: bad bytes")
        else:
            check.expected(fact)
    (finding,) = [f for f in check.finish() if f.runId == run]
    assert (finding.kind, finding.sequence) == ("unreadable", _sequence_of(events, early))

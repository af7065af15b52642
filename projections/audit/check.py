"""Verifying an audit trail against the events log (pure: the shell feeds both sides).

`ChainCheck` recomputes each run's chain from the events (`expected`) and compares it, link
by link and in order, with the stored records (`stored`). Per run it keeps only the links
one side has and the other not yet (both sides are read in step), and it stops checking a
run at its first finding, which names the run, the sequence, where (events and audit
positions) and what differs:

- `mismatch`: the stored record differs from the recomputed one (changed, deleted or
  reordered event or record); the fields that differ are listed;
- `broken`: a stored record does not chain (its recordHash does not match its own fields,
  or its prevHash/sequence does not follow the previous stored record);
- `missing`: an event has no audit record; `extra`: a stored record has no event;
- `unreadable`: an event or record that cannot be decoded.

Every finding names the first broken link by its own sequence: an unreadable event the
sequence its audit record would have (one past the events of its run read before it), an
unreadable record the position it holds in the stored chain. A problem found on one side
waits in that side's queue at its place, so the run's finding is the first link in chain
order whichever side was read ahead.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import NamedTuple

from runfacts.projections.audit import reducer as audit
from runfacts.projections.audit.summary import AuditConfig
from runfacts.projections.facts import Fact

MAX_DIFFS = 6
KEYED = b"hmac-sha256:"
"""How a keyed digest starts in a record's bytes (`audit_summary.digest` under a key)."""


class Finding(NamedTuple):
    """The first broken or missing link of one run."""

    runId: str
    sequence: int
    kind: str
    where: str
    what: str

    def __str__(self) -> str:
        return f"run {self.runId} seq {self.sequence}: {self.kind} at {self.where}: {self.what}"


class _Expected(NamedTuple):
    sequence: int
    body: bytes
    where: str


class _Stored(NamedTuple):
    record: audit.AuditRecord
    body: bytes
    where: str


class _Problem(NamedTuple):
    """A link one side cannot give (unreadable, broken): the run's finding when its turn comes."""

    sequence: int
    kind: str
    where: str
    what: str


@dataclass
class _Run:
    head: audit.ChainHead | None = None
    stored_head: audit.ChainHead | None = None
    expected: deque[_Expected | _Problem] = field(default_factory=deque)
    stored: deque[_Stored | _Problem] = field(default_factory=deque)
    matched: int = 0

    def next_expected(self) -> int:
        """The sequence the run's next event would have in the chain."""
        return 1 if self.head is None else self.head.sequence + 1

    def next_stored(self) -> int:
        """The place the run's next stored record holds in the chain."""
        return 1 if self.stored_head is None else self.stored_head.sequence + 1


class ChainCheck:
    """Feeds: events (in log order) and stored audit records (in audit-topic order)."""

    def __init__(self, run_id: str | None = None, config: AuditConfig | None = None) -> None:
        self.run_id, self.config = run_id, config or AuditConfig()
        self.runs: dict[str, _Run] = {}
        self.findings: dict[str, Finding] = {}
        self.events = self.records = 0
        self.keyed_records = 0
        """Stored records holding keyed (HMAC) digests: they verify only under the projector's key."""

    def _run(self, run_id: str) -> _Run | None:
        if (self.run_id is not None and run_id != self.run_id) or run_id in self.findings:
            return None
        return self.runs.setdefault(run_id, _Run())

    def expected(self, fact: Fact) -> None:
        """One event of the log: recompute its link."""
        summary = audit.summarize(fact, self.config)
        run = self._run(summary.run_id)
        if run is None or _blocked(run.expected):
            return
        self.events += 1
        run.head, body = audit.link(run.head, fact, summary)
        run.expected.append(_Expected(run.head.sequence, body, fact.where()))
        self._match(summary.run_id, run)

    def stored(self, body: bytes, where: str) -> None:
        """One record of the audit topic (unframed body)."""
        record = audit.decode(body)
        if KEYED in body and self.run_id in (None, record.run_id):
            self.keyed_records += 1  # counted past a run's first finding, too
        run = self._run(record.run_id)
        if run is None or _blocked(run.stored):
            return
        self.records += 1
        problem = _chain_problem(run.stored_head, record)
        if problem:
            run.stored.append(_Problem(record.sequence, "broken", where, problem))
            self._match(record.run_id, run)
            return
        run.stored_head = audit.head_of(record)
        run.stored.append(_Stored(record, body, where))
        self._match(record.run_id, run)

    def unreadable(self, run_id: str, where: str, error: str, *, record: bool = False) -> None:
        """An event (or, `record`, an audit record) that does not decode (run from the Kafka
        key): the run's finding at the sequence of its own link."""
        run = self._run(run_id)
        if run is None:
            return
        side = run.stored if record else run.expected
        if _blocked(side):
            return
        side.append(_Problem(run.next_stored() if record else run.next_expected(), "unreadable", where, error))
        self._match(run_id, run)

    def _match(self, run_id: str, run: _Run) -> None:
        """Pair the links both sides have, in chain order; a problem at the head of either side
        is the next unmatched link, so it is the run's first finding."""
        while True:
            problem = next((side[0] for side in (run.expected, run.stored)
                            if side and isinstance(side[0], _Problem)), None)
            if problem is not None:
                self._found(run_id, problem.sequence, problem.kind, problem.where, problem.what)
                return
            if not (run.expected and run.stored):
                return
            expected, stored = run.expected.popleft(), run.stored.popleft()
            assert isinstance(expected, _Expected) and isinstance(stored, _Stored)
            if expected.body != stored.body:
                self._found(run_id, expected.sequence, "mismatch",
                            f"{expected.where} vs audit {stored.where}",
                            "; ".join(diff(stored.record, audit.decode(expected.body))))
                return
            run.matched += 1

    def _found(self, run_id: str, sequence: int, kind: str, where: str, what: str) -> None:
        self.findings[run_id] = Finding(run_id, sequence, kind, where, what)
        self.runs.pop(run_id, None)

    def finish(self) -> list[Finding]:
        """Every run's first finding (missing and extra links included), by run id."""
        for run_id, run in list(self.runs.items()):
            first = run.expected[0] if run.expected else None
            first_stored = run.stored[0] if run.stored else None
            if isinstance(first, _Expected):
                self._found(run_id, first.sequence, "missing", first.where,
                            f"the event has no audit record ({len(run.expected)} events "
                            f"unaudited; the stored chain ends at sequence {run.matched})")
            elif isinstance(first_stored, _Stored):
                self._found(run_id, first_stored.record.sequence, "extra", first_stored.where,
                            f"no event in the log for this record (eventId "
                            f"{first_stored.record.event.eventId} at "
                            f"{first_stored.record.topic}[{first_stored.record.partition}]"
                            f"@{first_stored.record.offset})")
        return [self.findings[r] for r in sorted(self.findings)]

    @property
    def verified_runs(self) -> int:
        return len(self.runs)


def _blocked(side: deque[_Expected | _Problem] | deque[_Stored | _Problem]) -> bool:
    """A side that holds a problem takes nothing more: the run's finding is at or before it."""
    return bool(side) and isinstance(side[-1], _Problem)


def _chain_problem(head: audit.ChainHead | None, record: audit.AuditRecord) -> str:
    """Why a stored record does not follow `head` (empty when it does)."""
    if audit.record_hash(record) != record.recordHash:
        return "recordHash does not match the record's own fields (record altered)"
    sequence = 1 if head is None else head.sequence + 1
    prev = audit.GENESIS if head is None else head.recordHash
    if record.sequence != sequence:
        return f"sequence {record.sequence} follows {sequence - 1} (record missing or reordered)"
    if record.prevHash != prev:
        return f"prevHash {record.prevHash[:12]}… is not the previous record's {prev[:12]}…"
    return ""


def diff(stored: audit.AuditRecord, expected: audit.AuditRecord) -> list[str]:
    """Which fields differ, stored vs recomputed (nested fields dotted)."""
    found: list[str] = []
    _diff(stored, expected, "", found)
    return found[:MAX_DIFFS] + ([f"… {len(found) - MAX_DIFFS} more"] if len(found) > MAX_DIFFS
                                else [])


def _diff(a: object, b: object, path: str, out: list[str]) -> None:
    if a == b:
        return
    if isinstance(a, tuple) and isinstance(b, tuple) and hasattr(a, "_fields") \
            and type(a) is type(b):
        for name in a._fields:  # type: ignore[attr-defined]
            _diff(getattr(a, name), getattr(b, name), f"{path}.{name}" if path else name, out)
    elif isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _diff(x, y, f"{path}[{i}]", out)
    else:
        out.append(f"{path}: stored {_short(a)}, log gives {_short(b)}")


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "…"

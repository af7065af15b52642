"""The run list, pure: which runs a viewer sees, filtered, searched, sorted and paged.

`ListQuery` is the page's query string (status, needs review, stuck longer than, tenant,
search by run id, page); `run_list` picks the visible runs, filters them, sorts by last change
(newest first) and builds rows for one page only, so a list of 10,000 runs costs one pass and
one sort, not 10,000 rows. The goal summary is personal: auditors only.

The list, the inbox and the health page read `RunRow`s (`row_of(state)`): what they show of
every run, kept by the dashboard for each run instead of its whole State (a few hundred bytes,
not ~19 KiB decoded), so 10,000 runs stay small; the full State is read when a page needs it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from runfacts.dashboard.runpage import NONE_TEXT, why_asked
from runfacts.ops.views import ORPHAN_AFTER, REVIEW, Viewer, checkpoint_lag, parse_duration, retries
from runfacts.processors.decider.state import TERMINAL, RunState
from runfacts.processors.policy.display import display_lines, masked
from runfacts.schemas.common import ArgDisplay
from runfacts.schemas.pii import MASK

PER_PAGE = 50
MAX_PER_PAGE = 500


@dataclass(frozen=True, slots=True)
class OpenApproval:
    """An open approval as the inbox lists it."""

    approvalId: str
    toolCallId: str
    action: str
    target: str
    risk: str
    requiredRole: str
    argsHash: str
    expiresAt: datetime
    display: ArgDisplay | None = None  # the arguments as the approver sees them (docs/decisions/argument-display.md)
    capability: str = ""
    requesters: tuple[str, ...] = ()  # who the request stands for (personal: auditors read them)


@dataclass(frozen=True, slots=True)
class PendingMemory:
    """A memory candidate waiting for a reviewer (refs and hashes only, as the State holds it)."""

    memoryId: str
    statementRef: str
    scope: str  # "<kind>:<id>"
    evidence: int  # how many facts it cites
    proposedBy: str
    proposedAt: datetime
    expiresAt: datetime
    candidateHash: str


@dataclass(frozen=True, slots=True)
class RunRow:
    """What the list, inbox and health page need of one run (the compact summary of its State)."""

    runId: str
    userId: str | None
    tenant: str | None
    status: str
    statusReason: str | None
    statusSince: datetime
    updatedAt: datetime
    goalSummary: str
    in_flight: int
    approvals: tuple[OpenApproval, ...]
    memories: tuple[PendingMemory, ...] = ()
    retries: int = 0  # attempts past the first over the run's calls (`ops.views.retries`)
    claimable: tuple[datetime, ...] = ()  # since when each call waiting for a dispatcher's claim waits
    checkpoint_lag: timedelta = timedelta(0)  # `ops.views.checkpoint_lag`
    version: int = 0  # the run's version: an inbox decision carries it as expectedVersion
    capabilities: tuple[str, ...] = ()  # the capabilities its (uncompacted) tool calls called
    errorClasses: tuple[str, ...] = ()  # its calls' error classes (compacted ones too) and a failed run's
    createdAt: datetime | None = None

    def stuck_for(self, now: datetime) -> timedelta | None:
        """How long a run that has not ended has been in its status (`ops.views.stuck_for`)."""
        return None if self.status in TERMINAL else max(now - self.statusSince, timedelta(0))

    def orphans(self, now: datetime, after: timedelta = ORPHAN_AFTER) -> int:
        """Calls no dispatcher owns: waiting for a claim longer than `after` (`ops.views.orphaned_calls`)."""
        return 0 if self.status in TERMINAL else sum(1 for since in self.claimable if now - since > after)


def row_of(state: RunState) -> RunRow:
    """The run's row (its open approvals with the action and target of their calls)."""
    approvals = []
    for a in state.open_approvals():
        call = state.toolCalls.get(a.toolCallId)
        approvals.append(OpenApproval(a.approvalId, a.toolCallId, call.action if call else "",
                                      call.target if call else "", a.risk, a.requiredRole, a.argsHash, a.expiresAt,
                                      call.display if call else None, call.capabilityId if call else a.toolCallId,
                                      a.requesters))
    memories = tuple(PendingMemory(m.memoryId, m.statementRef, f"{m.scopeKind}:{m.scopeId}", len(m.evidence),
                                   m.proposedBy, m.proposedAt, m.expiresAt, m.candidateHash)
                     for m in state.memories.values() if m.status == "proposed")
    claimable = tuple(c.claimableSince or c.proposedAt for c in state.toolCalls.values() if c.awaiting_claim)
    capabilities = tuple(dict.fromkeys(c.capabilityId for c in state.toolCalls.values()))
    errors = [c.errorClass for c in state.toolCalls.values() if c.errorClass]
    errors += [how.split("/", 1)[1] for how, _h in state.settledCalls.values() if how.startswith("failed/")]
    if state.status == "failed" and state.statusReason:
        errors.append(state.statusReason)
    return RunRow(state.runId, state.userId, state.tenant, str(state.status), state.statusReason, state.statusSince,
                  state.updatedAt, state.goalSummary, len(state.in_flight_calls()), tuple(approvals), memories,
                  retries(state), claimable, checkpoint_lag(state), state.version, capabilities,
                  tuple(dict.fromkeys(errors)), state.createdAt)


@dataclass(frozen=True)
class HealthRow:
    """One run's health: stuck time, retries, orphaned calls, checkpoint lag (facts past its last
    checkpoint when the facts feed counted them, and time), policy denials by reason."""

    run_id: str
    status: str
    stuck: timedelta | None
    retries: int
    orphans: int
    checkpoint_facts: int | None  # None: not counted (the facts feed is not followed)
    checkpoint_lag: timedelta
    denials: Mapping[str, int]


@dataclass(frozen=True)
class FleetHealth:
    """Every visible run's health summed, and the runs that need a look, worst first."""

    runs: int
    stuck: int
    longest_stuck: timedelta
    retries: int
    orphans: int
    checkpoint_facts_max: int | None
    checkpoint_lag_max: timedelta
    denials: Mapping[str, int]
    worst: tuple[HealthRow, ...]


def fleet_health(runs: Iterable[RunRow], viewer: Viewer, now: datetime, stuck_after: timedelta,
                 since_checkpoint: Mapping[str, int] | None = None,
                 denials: Mapping[str, Mapping[str, int]] | None = None, show: int = 20,
                 owner: Callable[[str | None], str | None] | None = None,
                 after: timedelta = ORPHAN_AFTER) -> FleetHealth:
    """The health of the runs this viewer may see: totals, and the `show` runs that need a look
    (orphaned calls, stuck longer than `stuck_after`, retried, denied, or past their checkpoint)."""
    owner_of = owner or _same
    rows = []
    for s in runs:
        if not viewer.may_see(owner_of(s.userId), s.tenant):
            continue
        rows.append(HealthRow(s.runId, s.status, s.stuck_for(now), s.retries, s.orphans(now, after),
                              None if since_checkpoint is None else since_checkpoint.get(s.runId, 0),
                              s.checkpoint_lag, dict((denials or {}).get(s.runId, {}))))
    total: dict[str, int] = {}
    for r in rows:
        for reason, n in r.denials.items():
            total[reason] = total.get(reason, 0) + n
    stuck = [r for r in rows if r.stuck is not None and r.stuck > stuck_after]
    attention = [r for r in rows if r.orphans or r in stuck or r.retries or r.denials]
    attention.sort(key=lambda r: (-r.orphans, -(r.stuck or timedelta(0)).total_seconds(), -r.retries, r.run_id))
    facts = [r.checkpoint_facts for r in rows if r.checkpoint_facts is not None]
    return FleetHealth(len(rows), len(stuck), max((r.stuck for r in stuck if r.stuck), default=timedelta(0)),
                       sum(r.retries for r in rows), sum(r.orphans for r in rows),
                       max(facts, default=0) if since_checkpoint is not None else None,
                       max((r.checkpoint_lag for r in rows if r.status not in TERMINAL), default=timedelta(0)),
                       dict(sorted(total.items())), tuple(attention[:show]))


def _moment(name: str, value: str) -> datetime | None:
    """A query's time ('2026-12-06', '2026-12-06T10:00', with or without zone: UTC when none)."""
    if not value:
        return None
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{name}={value!r}: give a date or a time like 2026-12-06 or 2026-12-06T10:00 "
                         "(UTC unless it names its zone)") from None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


@dataclass(frozen=True)
class ListQuery:
    """What the list shows: filters, search and page. Every filter is in the URL (a list can be
    shared); they combine (a run must match all of them)."""

    status: str = ""
    needs_review: bool = False
    stuck: str = ""  # a duration ("10m"): runs not ended that sat in their status longer
    tenant: str = ""
    q: str = ""  # run id contains
    page: int = 1
    per_page: int = PER_PAGE
    user: str = ""  # the run's user, exactly (its id as the dashboard reveals it)
    capability: str = ""  # a capability one of its tool calls called (contains)
    error: str = ""  # an error class of one of its calls or of the run (contains)
    since: str = ""  # started at or after (ISO date or time, UTC unless zoned)
    until: str = ""  # started before

    @classmethod
    def parse(cls, params: Mapping[str, str]) -> ListQuery:
        """From a query string; ValueError naming the bad parameter."""
        stuck = params.get("stuck", "").strip()
        if stuck:
            parse_duration(stuck)
        try:
            page, per_page = int(params.get("page", "1") or 1), int(params.get("per_page", str(PER_PAGE)) or PER_PAGE)
        except ValueError:
            raise ValueError("page and per_page must be whole numbers") from None
        if page < 1 or not 1 <= per_page <= MAX_PER_PAGE:
            raise ValueError(f"page must be >= 1 and per_page 1..{MAX_PER_PAGE}")
        since, until = params.get("since", "").strip(), params.get("until", "").strip()
        start, end = _moment("since", since), _moment("until", until)
        if start is not None and end is not None and start >= end:
            raise ValueError(f"since={since!r} is not before until={until!r}: swap them or widen the range")
        return cls(params.get("status", "").strip(), params.get("review", "") in ("1", "on", "true"), stuck,
                   params.get("tenant", "").strip(), params.get("q", "").strip(), page, per_page,
                   params.get("user", "").strip(), params.get("capability", "").strip(),
                   params.get("error", "").strip(), since, until)

    def query_string(self, **changes: Any) -> str:
        q = replace(self, **changes)
        values = {"status": q.status, "review": "1" if q.needs_review else "", "stuck": q.stuck,
                  "tenant": q.tenant, "q": q.q, "user": q.user, "capability": q.capability, "error": q.error,
                  "since": q.since, "until": q.until, "page": str(q.page) if q.page > 1 else "",
                  "per_page": str(q.per_page) if q.per_page != PER_PAGE else ""}
        return urlencode({k: v for k, v in values.items() if v})

    def matches(self, state: RunRow, now: datetime, owner: Callable[[str | None], str | None] | None = None) -> bool:
        if self.q and self.q not in state.runId:
            return False
        if self.user and (owner or _same)(state.userId) != self.user:
            return False
        if self.capability and not any(self.capability in c for c in state.capabilities):
            return False
        if self.error and not any(self.error in e for e in state.errorClasses):
            return False
        start, end = _moment("since", self.since), _moment("until", self.until)
        if (start is not None or end is not None) and state.createdAt is None:
            return False
        if start is not None and state.createdAt is not None and state.createdAt < start:
            return False
        if end is not None and state.createdAt is not None and state.createdAt >= end:
            return False
        if self.status and state.status != self.status:
            return False
        if self.needs_review and state.status not in REVIEW:
            return False
        if self.tenant and state.tenant != self.tenant:
            return False
        if self.stuck:
            stuck = state.stuck_for(now)
            return stuck is not None and stuck > parse_duration(self.stuck)
        return True


@dataclass(frozen=True)
class ListRow:
    run_id: str
    goal: str
    status: str
    status_reason: str
    updated_at: datetime
    pending_approvals: int
    in_flight: int
    needs_review: bool
    tenant: str | None  # None: not shown to this viewer
    stuck: timedelta | None


@dataclass(frozen=True)
class RunList:
    rows: tuple[ListRow, ...]
    total: int  # runs matching the query (all pages)
    query: ListQuery

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // self.query.per_page))


def _same(user_id: str | None) -> str | None:
    return user_id


def run_list(runs: Iterable[RunRow], viewer: Viewer, query: ListQuery, now: datetime,
             owner: Callable[[str | None], str | None] = _same) -> RunList:
    """The runs this viewer may see that match `query`, newest change first, one page of rows.
    `owner`: a run's userId as the viewer's subject compares with it (the dashboard reveals a
    pseudonym with its keys, as the run page does)."""
    matching = [s for s in runs if viewer.may_see(owner(s.userId), s.tenant) and query.matches(s, now, owner)]
    matching.sort(key=lambda s: (s.updatedAt, s.runId), reverse=True)
    start = (query.page - 1) * query.per_page
    staff = viewer.role in ("operator", "auditor")
    rows = tuple(ListRow(
        s.runId, s.goalSummary if viewer.role == "auditor" else MASK, s.status, s.statusReason or "",
        s.updatedAt, len(s.approvals), s.in_flight, s.status in REVIEW,
        (s.tenant or "") if staff else None, s.stuck_for(now)) for s in matching[start:start + query.per_page])
    return RunList(rows, len(matching), query)


@dataclass(frozen=True)
class InboxRow:
    run_id: str
    approval_id: str
    tool_call_id: str
    action: str
    target: str
    risk: str
    required_role: str
    args_hash: str
    expires_at: datetime
    tenant: str | None  # None: not shown to this viewer
    arguments: tuple[str, ...] = ()  # the display's lines; personal values for auditors only
    why: str = ""  # why a person decides
    asked_for: str = MASK  # who the request stands for (auditors), else [redacted]
    version: int = 0  # the run's version the row shows (the decision's expectedVersion)
    asked_by: str = NONE_TEXT  # who proposed the call that asks (the approval.required fact's proposedBy)


def _nobody(run_id: str, approval_id: str) -> str:
    return NONE_TEXT


def inbox(runs: Iterable[RunRow], viewer: Viewer,
          owner: Callable[[str | None], str | None] = _same,
          proposer: Callable[[str, str], str] = _nobody) -> list[InboxRow]:
    """Every open approval this viewer's roles may decide, on runs they may see, oldest first
    (earliest expiry first: the approval's age is its TTL minus the time left). `proposer`: who
    asked an approval of a run, as this viewer may read it (`runpage.proposers` over its facts)."""
    rows = []
    staff = viewer.role in ("operator", "auditor")
    for s in runs:
        if not viewer.may_see(owner(s.userId), s.tenant):
            continue
        for a in s.approvals:
            if a.requiredRole not in viewer.roles:
                continue
            shown = a.display if viewer.role == "auditor" else masked(a.display)
            rows.append(InboxRow(s.runId, a.approvalId, a.toolCallId, a.action, a.target, a.risk, a.requiredRole,
                                 a.argsHash, a.expiresAt, (s.tenant or "") if staff else None,
                                 tuple(display_lines(shown)), why_asked(a.risk, a.requiredRole, a.capability),
                                 ", ".join(str(owner(r)) for r in a.requesters) if viewer.role == "auditor"
                                 else MASK, s.version, proposer(s.runId, a.approvalId)))
    return sorted(rows, key=lambda r: (r.expires_at, r.run_id, r.approval_id))


REVIEWER = "memory_reviewer"


@dataclass(frozen=True)
class MemoryRow:
    run_id: str
    memory: PendingMemory
    tenant: str | None  # None: not shown to this viewer


def memory_inbox(runs: Iterable[RunRow], viewer: Viewer, now: datetime) -> list[MemoryRow]:
    """Every pending, unexpired memory candidate on runs a memory reviewer may see, oldest
    proposal first (none for a viewer without the memory_reviewer role)."""
    if REVIEWER not in viewer.roles:
        return []
    staff = viewer.role in ("operator", "auditor")
    rows = [MemoryRow(s.runId, m, (s.tenant or "") if staff else None)
            for s in runs if viewer.may_see(s.userId, s.tenant) for m in s.memories if now < m.expiresAt]
    return sorted(rows, key=lambda r: (r.memory.proposedAt, r.run_id, r.memory.memoryId))

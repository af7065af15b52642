"""Memory candidates and their promotion: persistence is not memory (SEMANTICS.md §10).

A run proposes what it learned (`memory.propose`: a statement ref, never its text; evidence
as event ids of the run; a scope (tenant, capability or topic); a mandatory expiry). Only a
reviewer's decision promotes it (`memory.review`, the role from the policy's command rules),
bound to the candidate's hash like an approval to its arguments and, with a keyring, signed
with the approval token format. Rules, each a typed rejection:
1. propose: a new `memory-` id; scope kind capability or topic; scope tenant = the run's
   tenant; at least one evidence ref; an expiry after issuedAt.
2. review: a candidate still proposed (a second decision is `memory_already_decided`, one on
   a revoked candidate `memory_revoked`); not past its expiry; the hash the reviewer saw; not
   the proposer; a valid token when signing is on. Confirmation also re-checks the evidence:
   every ref must be an evidence-grade event of this run (`RunState.evidence`; the run is of
   the scope's tenant), so a ref from another run or tenant is `evidence_not_in_run`.
3. revoke: any candidate not already revoked or expired, even on an archived run.
4. expiry: the decider's `memory_expiry` timer (processors/decider/timers.py) fires at a live
   candidate's or memory's `expiresAt`, even on an ended or archived run, and writes
   `memory.expired`; a late or repeated firing decides nothing. Review or revocation of an
   expired candidate is `memory_expired`.
Pure: decide handlers and evolve cases only.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from typing import Any

from runfacts.processors.decider.context import DecideContext, Draft, Rejected, draft
from runfacts.processors.decider.state import EVIDENCE_TYPES, EVIDENCE_WINDOW, MemoryCandidate, RunState
from runfacts.schemas import commands as cmd
from runfacts.schemas import events as ev
from runfacts.schemas.common import EventBase
from runfacts.schemas.construct import trusted

SCOPE_KINDS = frozenset({"capability", "topic"})
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)

__all__ = ["apply_memory", "candidate_hash", "expire_memory", "propose_memory", "remember_evidence",
           "review_memory", "revoke_memory"]


def candidate_hash(run_id: str, p: cmd.ProposeMemoryPayload | ev.MemoryProposedPayload) -> str:
    """sha256 of the candidate's canonical JSON: what a reviewer's decision binds to."""
    body = {"runId": run_id, "memoryId": p.memoryId, "statementRef": p.statementRef,
            "statementHash": p.statementHash, "evidence": list(p.evidence), "scopeTenant": p.scopeTenant,
            "scopeKind": p.scopeKind, "scopeId": p.scopeId,
            "expiresAtMs": (p.expiresAt - _EPOCH) // timedelta(milliseconds=1)}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def propose_memory(c: cmd.ProposeMemory, state: RunState, ctx: DecideContext) -> list[Draft]:
    p = c.payload
    if not p.memoryId.startswith("memory-"):
        raise Rejected(c, "invalid_memory_id", f"{p.memoryId}: a memory id starts with memory-")
    if p.scopeKind not in SCOPE_KINDS:
        raise Rejected(c, "invalid_scope", f"scopeKind {p.scopeKind}: expected one of {sorted(SCOPE_KINDS)}")
    if state.tenant is None or p.scopeTenant != state.tenant:
        raise Rejected(c, "scope_tenant_mismatch", "a memory's scope tenant is its run's tenant")
    if not p.evidence:
        raise Rejected(c, "evidence_required", "cite at least one event id of the run")
    if p.expiresAt <= c.issuedAt:
        raise Rejected(c, "expiry_in_past", f"expiresAt {p.expiresAt.isoformat()} <= issuedAt")
    if p.memoryId in state.memories:
        raise Rejected(c, "memory_exists", p.memoryId)
    return [draft(ev.MemoryProposed, memoryId=p.memoryId, statementRef=p.statementRef,
                  statementHash=p.statementHash, evidence=list(p.evidence), scopeTenant=p.scopeTenant,
                  scopeKind=p.scopeKind, scopeId=p.scopeId, expiresAt=p.expiresAt,
                  candidateHash=candidate_hash(c.runId, p), summary=p.summary, actor=c.actor)]


def _candidate(c: cmd.ReviewMemory | cmd.RevokeMemory, state: RunState) -> MemoryCandidate:
    memory = state.memories.get(c.payload.memoryId)
    if memory is None:
        raise Rejected(c, "unknown_memory", c.payload.memoryId)
    if memory.status == "revoked":
        raise Rejected(c, "memory_revoked", f"{memory.memoryId} was revoked")
    if memory.status == "expired":
        raise Rejected(c, "memory_expired", f"expired at {memory.expiresAt.isoformat()}")
    return memory


def review_memory(c: cmd.ReviewMemory, state: RunState, ctx: DecideContext) -> list[Draft]:
    """Confirm or reject a candidate (module doc, rule 2)."""
    p, memory = c.payload, _candidate(c, state)
    if memory.status != "proposed":
        raise Rejected(c, "memory_already_decided", f"{memory.memoryId} is {memory.status}")
    if c.issuedAt >= memory.expiresAt:
        raise Rejected(c, "memory_expired", f"expired at {memory.expiresAt.isoformat()}")
    if p.candidateHash != memory.candidateHash:
        raise Rejected(c, "candidate_changed", "the decision binds to another candidate")
    if c.actor.subjectId == memory.proposedBy:
        raise Rejected(c, "self_review_forbidden", f"{memory.proposedBy} proposed it")
    if ctx.verify_review_token is not None:
        bad = ctx.verify_review_token(c, memory)
        if bad is not None:
            raise Rejected(c, bad)
    ids: dict[str, Any] = {"memoryId": memory.memoryId, "candidateHash": memory.candidateHash, "actor": c.actor}
    if p.decision == "reject":
        return [draft(ev.MemoryRejected, **ids)]
    _check_evidence(c, state, memory)
    return [draft(ev.MemoryConfirmed, **ids)]


def _check_evidence(c: cmd.ReviewMemory, state: RunState, memory: MemoryCandidate) -> None:
    if not memory.evidence:
        raise Rejected(c, "evidence_required", "a memory without evidence is not promoted")
    if memory.scopeTenant != state.tenant:
        raise Rejected(c, "scope_tenant_mismatch", "the candidate's scope is another tenant's")
    known = set(state.evidence)
    missing = [ref for ref in memory.evidence if ref not in known]
    if missing:
        raise Rejected(c, "evidence_not_in_run", f"not evidence-grade events of this run (the last "
                       f"{EVIDENCE_WINDOW}): {', '.join(missing[:5])}")


def revoke_memory(c: cmd.RevokeMemory, state: RunState, ctx: DecideContext) -> list[Draft]:
    memory = _candidate(c, state)
    return [draft(ev.MemoryRevoked, memoryId=memory.memoryId, reason=c.payload.reason, actor=c.actor)]


def expire_memory(c: cmd.FireTimer, state: RunState) -> list[Draft]:
    """The `memory_expiry` timer fell due (module doc, rule 4)."""
    memory = state.memories.get(c.payload.targetId)
    early = memory is not None and memory.expiresAt - c.issuedAt >= _MS  # timers are due at whole ms
    if memory is None or memory.status not in ("proposed", "confirmed") or early:
        return []  # stale: the memory moved on (rejected, revoked, expired) or the timer fired early
    return [draft(ev.MemoryExpired, memoryId=memory.memoryId, expiresAt=memory.expiresAt)]


# --- evolve ---------------------------------------------------------------------------

def remember_evidence(state: RunState, event: EventBase) -> tuple[str, ...] | None:
    """The run's evidence window with `event` added, or None when it is not evidence-grade."""
    if event.eventType not in EVIDENCE_TYPES:
        return None
    return (*state.evidence, event.eventId)[-EVIDENCE_WINDOW:]


def apply_memory(s: RunState, e: EventBase) -> dict[str, Any]:
    """A memory event's change to the run's candidates."""
    p: Any = e.payload
    if isinstance(e, ev.MemoryProposed):
        memory = MemoryCandidate(
            memoryId=p.memoryId, statementRef=p.statementRef, statementHash=p.statementHash,
            evidence=tuple(p.evidence), scopeTenant=p.scopeTenant, scopeKind=p.scopeKind,
            scopeId=p.scopeId, expiresAt=p.expiresAt, candidateHash=p.candidateHash,
            proposedBy=p.actor.subjectId, proposedAt=e.occurredAt)
        return {"memories": {**s.memories, memory.memoryId: memory}}
    old = s.memories[p.memoryId]  # evolve checked it exists
    if isinstance(e, ev.MemoryExpired):  # the reviewer's decision stays on record
        new = trusted(MemoryCandidate, {**old.__dict__, "status": "expired"})
        return {"memories": {**s.memories, old.memoryId: new}}
    status = {"memory.confirmed": "confirmed", "memory.rejected": "rejected"}.get(e.eventType, "revoked")
    new = trusted(MemoryCandidate, {**old.__dict__, "status": status, "decidedBy": p.actor.subjectId,
                                    "decidedAt": e.occurredAt})
    return {"memories": {**s.memories, old.memoryId: new}}

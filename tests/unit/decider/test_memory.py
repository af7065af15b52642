"""Memory candidates and their promotion (SEMANTICS §10: persistence is not memory), given/when/then
with the packaged policy: a run proposes, a memory reviewer confirms or rejects, bound to the
candidate's hash; evidence must be facts of the run; expiry is mandatory; revocation is a command."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from decider_support import (
    AGENT,
    REFUND_HASH,
    RUN,
    T0,
    Scenario,
    claim,
    command,
    completed,
    create,
    policy_ctx,
    propose_refund,
    resume,
    tick,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runfacts.processors.decider.commands.memory import candidate_hash
from runfacts.processors.decider.security import to_millis
from runfacts.processors.policy.approvals import ApprovalClaims, Keyring, SigningKey, issue_token
from runfacts.processors.policy.retry import call_idempotency_key
from runfacts.projections import memory as memory_view
from runfacts.schemas import commands as cmd
from runfacts.schemas.common import Actor

POLICY = policy_ctx()
ACME_USER = Actor(subjectId="user-7", roles=("user",), tenant="acme", authSource="dashboard")
ACME_SUPPORT = Actor(subjectId="alice", roles=("support_agent",), tenant="acme", authSource="dashboard")
REVIEWER = Actor(subjectId="rita", roles=("memory_reviewer",), tenant="acme", authSource="dashboard")
GLOBEX_REVIEWER = Actor(subjectId="gus", roles=("memory_reviewer",), tenant="globex", authSource="dashboard")
MEMORY = "memory-refund-lesson-1"


def acme_run(tenant: str = "acme", run: str = RUN) -> Scenario:
    """A run of `tenant` whose refund completed: its tool.call.completed is evidence."""
    actor = ACME_USER.model_copy(update={"tenant": tenant})
    support = ACME_SUPPORT.model_copy(update={"tenant": tenant})
    created = create(tenant=tenant).model_copy(update={"actor": actor, "runId": run})
    key = call_idempotency_key(run, tenant, "refund", "order-001", REFUND_HASH, None)
    steps = [propose_refund(), resume(actor=support), claim(key=key), completed()]
    return Scenario(POLICY).given(created, *[c.model_copy(update={"runId": run}) for c in steps])


def evidence_of(s: Scenario, event_type: str = "tool.call.completed") -> str:
    return next(e.eventId for e in s.log if e.eventType == event_type)


def propose(evidence: tuple[str, ...], *, expires: datetime | None = None, tenant: str = "acme",
            memory: str = MEMORY, **kw: Any) -> cmd.ProposeMemory:
    at = kw.pop("at", None) or tick()
    return command(cmd.ProposeMemory, AGENT, at=at, memoryId=memory, statementRef="lessons/refund-1",
                   statementHash="h" * 64, evidence=evidence, scopeTenant=tenant, scopeKind="capability",
                   scopeId="payments.refund", expiresAt=expires or at + timedelta(days=30), **kw)


def review(s: Scenario, decision: str = "approve", actor: Actor = REVIEWER, memory: str = MEMORY,
           digest: str | None = None, **kw: Any) -> cmd.ReviewMemory:
    held = s.s.memories.get(memory)
    digest = digest or (held.candidateHash if held else "0" * 64)
    return command(cmd.ReviewMemory, actor, memoryId=memory, decision=decision, candidateHash=digest, **kw)


def proposed(s: Scenario | None = None) -> Scenario:
    s = s or acme_run()
    return s.given(propose((evidence_of(s),)))


# --- proposal -------------------------------------------------------------------------------

def test_propose_records_a_candidate_bound_to_its_hash_when_the_evidence_is_the_runs() -> None:
    s = acme_run()
    c = propose((evidence_of(s),))
    s.when(c).then("memory.proposed")
    event = s.event("memory.proposed").payload
    assert event.candidateHash == candidate_hash(RUN, c.payload) == s.s.memories[MEMORY].candidateHash
    assert (event.statementRef, event.scopeTenant, s.s.memories[MEMORY].status) == (
        "lessons/refund-1", "acme", "proposed")


def test_propose_rejected_when_there_is_no_evidence() -> None:
    acme_run().when(propose(())).rejected("evidence_required")


def test_propose_rejected_when_the_expiry_is_not_in_the_future() -> None:
    at = tick()
    acme_run().when(propose(("evt-x",), at=at, expires=at)).rejected("expiry_in_past")


def test_propose_rejected_when_the_scope_is_another_tenant() -> None:
    s = acme_run()
    s.when(propose((evidence_of(s),), tenant="globex")).rejected("scope_tenant_mismatch")


def test_propose_rejected_when_the_memory_id_is_taken() -> None:
    s = proposed()
    s.when(propose((evidence_of(s),))).rejected("memory_exists")


def test_propose_rejected_forbidden_role_when_a_human_proposes_for_the_agent() -> None:
    s = acme_run()
    c = propose((evidence_of(s),)).model_copy(update={"actor": REVIEWER})
    s.when(c).rejected("forbidden_role")


# --- promotion: the rules of issue 25 -------------------------------------------------------

def test_confirm_promotes_the_candidate_when_reviewer_evidence_and_expiry_hold() -> None:
    s = proposed()
    s.when(review(s)).then("memory.confirmed")
    memory = s.s.memories[MEMORY]
    assert (memory.status, memory.decidedBy) == ("confirmed", "rita")


def test_promotion_rejected_when_the_candidate_has_no_evidence_in_the_run() -> None:
    s = acme_run().given(propose(("evt-never-happened",)))
    s.when(review(s)).rejected("evidence_not_in_run")


def test_promotion_rejected_when_the_evidence_is_a_fact_of_another_tenants_run() -> None:
    other = acme_run(tenant="globex", run="run-globex-1")
    s = acme_run().given(propose((evidence_of(other),)))
    s.when(review(s)).rejected("evidence_not_in_run")


def test_promotion_rejected_when_the_evidence_is_a_request_not_a_fact() -> None:
    s = acme_run()  # approval.required is what was asked, not what happened
    s = s.given(propose((evidence_of(s, "approval.required"),)))
    s.when(review(s)).rejected("evidence_not_in_run")


def test_promotion_rejected_when_the_reviewer_is_of_another_tenant() -> None:
    s = proposed()
    s.when(review(s, actor=GLOBEX_REVIEWER)).rejected("tenant_mismatch")


def test_promotion_rejected_after_expiry() -> None:
    s = acme_run()
    at = tick()
    s = s.given(propose((evidence_of(s),), at=at, expires=at + timedelta(seconds=5)))
    late = review(s).model_copy(update={"issuedAt": at + timedelta(seconds=5)})
    s.when(late).rejected("memory_expired")


def test_double_confirmation_rejected_when_the_candidate_was_already_confirmed() -> None:
    s = proposed()
    s = s.given(review(s))
    s.when(review(s)).rejected("memory_already_decided")


def test_promotion_rejected_when_the_reviewer_saw_another_candidate() -> None:
    s = proposed()
    s.when(review(s, digest="f" * 64)).rejected("candidate_changed")


def test_promotion_rejected_forbidden_role_when_the_actor_is_not_a_memory_reviewer() -> None:
    s = proposed()
    s.when(review(s, actor=ACME_SUPPORT)).rejected("forbidden_role")


def test_reject_closes_the_candidate_without_checking_evidence() -> None:
    s = acme_run().given(propose(("evt-never-happened",)))
    s.when(review(s, "reject")).then("memory.rejected")
    assert s.s.memories[MEMORY].status == "rejected"
    s.when(review(s)).rejected("memory_already_decided")


# --- revocation -------------------------------------------------------------------------------

def test_revocation_withdraws_a_confirmed_memory_and_a_later_review_is_refused() -> None:
    s = proposed()
    s = s.given(review(s))
    s.when(command(cmd.RevokeMemory, REVIEWER, memoryId=MEMORY, reason="policy changed")).then("memory.revoked")
    assert s.s.memories[MEMORY].status == "revoked"
    s.when(review(s)).rejected("memory_revoked")
    s.when(command(cmd.RevokeMemory, REVIEWER, memoryId=MEMORY)).rejected("memory_revoked")


def test_revocation_accepted_when_the_run_was_archived() -> None:
    s = proposed()
    s = s.given(review(s), command(cmd.CompleteRun, outcomeRef="o"), command(cmd.ArchiveRun, checkpointRef=None))
    s.when(command(cmd.RevokeMemory, REVIEWER, memoryId=MEMORY)).then("memory.revoked")
    s.when(review(s, memory="memory-other")).rejected("run_archived")


def test_revocation_rejected_forbidden_role_when_the_agent_revokes() -> None:
    s = proposed()
    s.when(command(cmd.RevokeMemory, AGENT, memoryId=MEMORY)).rejected("forbidden_role")


# --- signed reviews: the approval token format, bound to the memory id and candidate hash ----

KEYRING = Keyring(keys={"k1": SigningKey(b"k" * 32)}, current="k1")


def _token(s: Scenario, at: datetime, decision: str = "approve", memory: str = MEMORY) -> str:
    claims = ApprovalClaims(run_id=RUN, approval_id=memory, args_hash=s.s.memories[MEMORY].candidateHash,
                            decision=decision, subject_id=REVIEWER.subjectId, expires_at_ms=to_millis(at) + 60_000)
    return issue_token(KEYRING, "k1", claims)


def signed() -> Scenario:
    """A proposed candidate; from now on the decider verifies signed reviews."""
    s = proposed()
    s.ctx = policy_ctx(KEYRING)
    return s


def test_signed_review_confirms_when_the_token_signs_this_candidate() -> None:
    s = signed()
    at = tick()
    s.when(review(s, reviewToken=_token(s, at)).model_copy(update={"issuedAt": at})).then("memory.confirmed")


def test_signed_review_rejected_when_the_token_is_missing_or_signs_another_decision() -> None:
    s = signed()
    s.when(review(s)).rejected("token_missing")
    at = tick()
    wrong = review(s, reviewToken=_token(s, at, "reject")).model_copy(update={"issuedAt": at})
    s.when(wrong).rejected("token_claims_mismatch")


def test_candidate_hash_changes_when_any_bound_field_changes() -> None:
    base = propose(("evt-1",), at=T0).payload
    variants = [base.model_copy(update={k: v}) for k, v in (
        ("statementRef", "lessons/other"), ("evidence", ("evt-2",)), ("scopeId", "orders.lookup"),
        ("expiresAt", base.expiresAt + timedelta(milliseconds=1)))]
    assert len({candidate_hash(RUN, p) for p in [base, *variants]}) == 5


# --- the memory view: a property over random histories ----------------------------------------

ACTIONS = st.lists(st.one_of(
    st.tuples(st.just("propose"), st.integers(0, 3), st.integers(1, 120)),
    st.tuples(st.sampled_from(["approve", "reject", "revoke"]), st.integers(0, 3), st.just(0)),
    st.tuples(st.just("advance"), st.just(0), st.integers(1, 90)),
), max_size=25)


def _step(s: Scenario, action: tuple[str, int, int], now: datetime, evidence: str) -> datetime:
    kind, i, n = action
    memory = f"memory-{i}"
    if kind == "advance":
        return now + timedelta(seconds=n)
    if kind == "propose":
        c = propose((evidence,) if i != 3 else ("evt-not-of-this-run",), at=now, memory=memory,
                    expires=now + timedelta(seconds=n))
    elif kind == "revoke":
        c = command(cmd.RevokeMemory, REVIEWER, at=now, memoryId=memory)
    else:
        c = review(s, kind, memory=memory).model_copy(update={"issuedAt": now})
    s.when(c)
    return now + timedelta(milliseconds=1)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ACTIONS)
def test_memory_view_never_holds_an_expired_revoked_or_unconfirmed_entry(actions: list) -> None:
    s = acme_run()
    evidence, now, view = evidence_of(s), s.s.updatedAt + timedelta(seconds=1), {}
    for action in actions:
        seen = len(s.log)
        now = _step(s, action, now, evidence)
        for event in s.log[seen:]:
            view = memory_view.evolve(view, event)
        shown = memory_view.entries(view, None, now)
        assert all(e.status == "confirmed" and now < e.expiresAt for e in shown)
        assert not any(e.memoryId == "memory-3" for e in shown)  # its evidence is not the run's
        oracle = sorted(m.memoryId for m in s.s.memories.values() if m.status == "confirmed" and now < m.expiresAt)
        assert [e.memoryId for e in shown] == oracle
        assert memory_view.entries(view, ("acme", "capability", "payments.refund"), now) == shown
        assert memory_view.entries(view, ("globex", "capability", "payments.refund"), now) == []


def test_memory_view_shows_a_confirmed_entry_until_its_expiry_then_nothing() -> None:
    s, view = acme_run(), {}
    now = s.s.updatedAt + timedelta(seconds=1)
    for action in [("propose", 0, 60), ("approve", 0, 0)]:
        now = _step(s, action, now, evidence_of(s))
    for event in s.log:
        view = memory_view.evolve(view, event)
    (entry,) = memory_view.entries(view, ("acme", "capability", "payments.refund"), now)
    assert (entry.runId, entry.evidence, entry.reviewer) == (RUN, (evidence_of(s),), "rita")
    assert memory_view.entries(view, None, now + timedelta(seconds=60)) == []


def test_console_reads_every_memory_and_hygiene_fact_in_plain_words() -> None:
    from runfacts.dashboard.runpage import words

    s = proposed()
    s = s.given(review(s), command(cmd.RevokeMemory, REVIEWER, memoryId=MEMORY), command(cmd.CompleteRun))
    said = {e.eventType: words(e) for e in s.log}
    assert said["memory.proposed"].startswith(f"Memory {MEMORY} proposed for capability payments.refund")
    assert said["memory.confirmed"] == f"Memory {MEMORY} confirmed by rita"
    assert said["memory.revoked"] == f"Memory {MEMORY} revoked by rita"
    assert said["checkpoint.archived"] == "Checkpoints archived: run completed"


def test_promotion_rejected_when_the_evidence_fell_out_of_the_runs_evidence_window() -> None:
    from runfacts.processors.decider.state import EVIDENCE_WINDOW

    s = acme_run()
    oldest = evidence_of(s)
    s = s.given(propose((oldest,)))
    for i in range(EVIDENCE_WINDOW):
        s.given(command(cmd.RecordFeedback, ACME_USER, feedbackId=f"fb-{i}", rating=5))
    assert oldest not in s.s.evidence and len(s.s.evidence) == EVIDENCE_WINDOW
    s.when(review(s)).rejected("evidence_not_in_run")


def test_memory_view_of_run_states_equals_the_view_folded_from_the_events() -> None:
    s = proposed()
    s = s.given(review(s), propose((evidence_of(s),), memory="memory-2"))
    folded: memory_view.MemoryView = {}
    for event in s.log:
        folded = memory_view.evolve(folded, event)
    assert memory_view.view_of_states([s.s]) == folded

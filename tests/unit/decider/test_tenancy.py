"""Tenancy in the run decider with the packaged policy: a tenant-bound actor acts only on runs
of its own tenant; services and cross-tenant roles act on every run (given/when/then)."""

from __future__ import annotations

from decider_support import (
    AGENT,
    DISPATCHER,
    OPERATOR,
    USER,
    Scenario,
    claim,
    command,
    completed,
    create,
    policy_ctx,
    propose_refund,
    resume,
)

from runfacts.schemas import commands as cmd
from runfacts.schemas.common import Actor

TENANCY = policy_ctx()
ACME_USER = USER.model_copy(update={"tenant": "acme"})
ACME_SUPPORT = Actor(subjectId="alice", roles=("support_agent",), tenant="acme", authSource="dashboard")
GLOBEX_SUPPORT = Actor(subjectId="gina", roles=("support_agent",), tenant="globex", authSource="dashboard")


def acme_run() -> Scenario:
    """A run of tenant acme waiting for the approval of a refund."""
    created = create(tenant="acme").model_copy(update={"actor": ACME_USER})
    return Scenario(TENANCY).given(created, propose_refund())


def test_run_goes_end_to_end_when_every_human_is_in_the_run_tenant():
    s = acme_run().given(resume(actor=ACME_SUPPORT), claim(), completed())
    s.given(command(cmd.CompleteRun, outcomeRef="out-1"))
    assert s.s.status == "completed" and s.s.tenant == "acme"


def test_resume_rejected_as_tenant_mismatch_when_approver_is_in_another_tenant():
    s = acme_run()
    version = s.s.version
    rejection = s.when(resume(actor=GLOBEX_SUPPORT)).rejected("tenant_mismatch")
    assert "gina" in rejection.detail and "globex" in rejection.detail
    assert "acme" not in rejection.detail  # the run's tenant is not told to another tenant
    assert s.s.version == version and s.s.approvals["approval-tool-call-031"].status == "open"


def test_stop_rejected_as_tenant_mismatch_when_user_has_no_tenant_and_run_has_one():
    acme_run().when(command(cmd.StopRun, USER, reason="not mine")).rejected("tenant_mismatch")


def test_create_rejected_as_tenant_mismatch_when_actor_creates_run_in_another_tenant():
    foreign = create(tenant="acme").model_copy(update={"actor": GLOBEX_SUPPORT.model_copy(
        update={"roles": ("user",)})})
    Scenario(TENANCY).when(foreign).rejected("tenant_mismatch")


def test_create_rejected_as_tenant_mismatch_when_tenant_actor_creates_tenantless_run():
    Scenario(TENANCY).when(create().model_copy(update={"actor": ACME_USER})).rejected("tenant_mismatch")


def test_operator_stops_run_of_any_tenant_when_role_is_cross_tenant():
    s = acme_run().when(command(cmd.StopRun, OPERATOR, reason="incident 42"))
    s.then("approval.invalidated", "run.cancel_requested", "run.cancelled", "checkpoint.saved", "checkpoint.archived")
    assert OPERATOR.tenant is None and s.s.status == "cancelled"


def test_operator_role_is_not_cross_tenant_when_source_cannot_vouch_for_it():
    claimed = Actor(subjectId="mallory", roles=("operator", "user"), tenant="globex",
                    authSource="outbox:support-desk")
    acme_run().when(command(cmd.StopRun, claimed, reason="x")).rejected("tenant_mismatch")


def test_services_act_on_run_of_a_tenant_when_their_source_is_not_tenant_scoped():
    s = acme_run().given(resume(actor=ACME_SUPPORT))
    assert AGENT.tenant is None and DISPATCHER.tenant is None
    s.when(claim()).then("tool.call.dispatching", "approval.consumed", "budget.debited")

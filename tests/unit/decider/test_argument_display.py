"""Issue 33, items 2-4: the decider validates a proposal's argument display against the tool's
schema before anyone is asked, evaluates the capability's approval rule on it, and records the
display's digest on the facts the approver and the dispatcher read."""

from __future__ import annotations

import operator
from dataclasses import replace
from typing import Annotated, Any

from decider_support import RUN, SUPPORT, Scenario, command, create, resume
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import Field

from runfacts.processors.decider.core import DecideContext
from runfacts.processors.dispatcher.core import display_mismatch
from runfacts.processors.policy.approvals import ApprovalClaims, Keyring, SigningKey, issue_token
from runfacts.processors.policy.capabilities import CapabilityCatalog
from runfacts.processors.policy.display import VALUE_CHARS, display_digest, render
from runfacts.processors.policy.retry import args_hash
from runfacts.schemas import commands as cmd
from runfacts.tools import ToolContext, ToolRegistry

registry = ToolRegistry("credits")
Cents = Annotated[int, Field(gt=0, le=100_000, json_schema_extra={"unit": "cents"})]


@registry.tool("billing.credit", risk="high", approval_when=[("amount_cents", ">", 5_000)])
def credit(account: str, amount_cents: Cents, customer: Annotated[str, Field(json_schema_extra={"pii": True})],
           note: str = "", ctx: ToolContext | None = None) -> dict[str, Any]:
    return {"credited": amount_cents}


@registry.tool("billing.refund", risk="high", needs_approval=True)
def refund(account: str, amount_cents: Cents) -> dict[str, Any]:
    return {}


CATALOG: CapabilityCatalog = registry.catalog()
CTX = DecideContext(capabilities=CATALOG, current_versions=Scenario().ctx.current_versions)
CREDIT = CATALOG.get("billing.credit")


def args(amount: int, **extra: Any) -> dict[str, Any]:
    return {"account": "acct-700", "amount_cents": amount, "customer": "Ada Lovelace", **extra}


def propose(arguments: dict[str, Any], display: dict[str, Any] | None = None, call: str = "call-1",
            capability: str = "billing.credit") -> cmd.ProposeToolCall:
    manifest = CATALOG.get(capability)
    shown = render(display if display is not None else arguments, manifest.schema_or_none(),
                   manifest.rule_fields())
    return command(cmd.ProposeToolCall, toolCallId=call, capabilityId=capability, argsHash=args_hash(arguments),
                   argsRef=f"args-{args_hash(arguments)}", target="acct-700", action="credit", risk="high",
                   summary="credit acct-700", display=shown)


def scenario() -> Scenario:
    return Scenario(CTX).given(create())


def test_propose_rejected_when_an_argument_breaks_its_bound_naming_the_field_and_the_bound() -> None:
    s = scenario()
    payload = s.when(propose(args(250_000))).rejected("invalid_arguments")
    assert "amount_cents" in payload.detail and "100000" in payload.detail and "maximum" in payload.detail
    assert s.s.toolCalls == {} and s.s.approvals == {}  # never proposed, nobody asked


def test_propose_rejected_when_a_required_argument_is_missing_or_one_is_unknown() -> None:
    missing = scenario().when(propose({"account": "acct-700", "customer": "Ada"})).rejected("invalid_arguments")
    assert "amount_cents: required" in missing.detail
    unknown = scenario().when(propose(args(100, bonus=True))).rejected("invalid_arguments")
    assert "bonus: not an argument" in unknown.detail
    wrong_type = scenario().when(propose(args("ten"))).rejected("invalid_arguments")  # type: ignore[arg-type]
    assert "amount_cents" in wrong_type.detail and "integer" in wrong_type.detail


def test_propose_authorized_at_once_when_the_rule_does_not_hold() -> None:
    s = scenario().when(propose(args(4_999)))
    s.then("tool.call.proposed", "tool.call.authorized")
    proposed = s.event("tool.call.proposed").payload
    assert proposed.displayDigest == display_digest(proposed.display)
    assert s.s.toolCalls["call-1"].displayDigest == proposed.displayDigest


def test_propose_asks_when_the_rule_holds_and_the_request_carries_display_and_digest() -> None:
    s = scenario().when(propose(args(5_001)))
    s.then("tool.call.proposed", "approval.required", "run.paused")
    required = s.event("approval.required").payload
    fields = {f.name: f for f in required.display.fields}
    assert fields["amount_cents"].value == "5001" and fields["amount_cents"].unit == "cents"
    assert fields["customer"].pii and fields["customer"].value is None and fields["customer"].personalValue
    assert required.displayDigest == display_digest(required.display)
    assert "amount_cents=5001: amount_cents > 5000" in s.event("run.paused").payload.detail
    assert s.s.approvals[required.approvalId].displayDigest == required.displayDigest


def test_a_personal_field_sent_in_the_clear_is_recorded_as_personal() -> None:
    shown = render(args(10), None)  # every field personal: the client knew no schema
    c = propose(args(10))
    c = c.model_copy(update={"payload": c.payload.model_copy(update={"display": shown})})
    s = scenario().when(c).then("tool.call.proposed", "tool.call.authorized")
    fields = {f.name: f for f in s.event("tool.call.proposed").payload.display.fields}
    assert fields["amount_cents"].value == "10" and not fields["amount_cents"].pii  # schema: not personal
    assert fields["customer"].pii and fields["customer"].value is None


def test_a_non_personal_field_whose_value_the_decider_cannot_read_is_rejected() -> None:
    """A sealed (or non-JSON) amount would hide the value the rule reads from the digest."""
    c = propose(args(10))
    hidden = tuple(f.model_copy(update={"value": None, "personalValue": "rfe1.sealed", "pii": True})
                   if f.name == "amount_cents" else f for f in c.payload.display.fields)
    shown = c.payload.display.model_copy(update={"fields": hidden})
    c = c.model_copy(update={"payload": c.payload.model_copy(update={"display": shown})})
    payload = scenario().when(c).rejected("invalid_arguments")
    assert "amount_cents: not personal in the tool's schema" in payload.detail


def test_a_proposal_without_display_asks_when_the_capability_has_a_rule() -> None:
    c = propose(args(10))
    c = c.model_copy(update={"payload": c.payload.model_copy(update={"display": None})})
    scenario().when(c).then("tool.call.proposed", "approval.required", "run.paused")


def test_needs_approval_asks_for_every_valid_call_and_a_long_value_is_cut_visibly_not_a_rule_field() -> None:
    s = scenario().when(propose({"account": "a" * 1000, "amount_cents": 10}, capability="billing.refund"))
    s.then("tool.call.proposed", "approval.required", "run.paused")
    account = s.event("approval.required").payload.display.fields[0]
    assert account.name == "account" and account.omittedChars == 1002 - VALUE_CHARS
    kept = render(args(10, note="n" * 1000), CREDIT.schema_or_none(), ("note",))
    assert {f.name: f.omittedChars for f in kept.fields}["note"] == 0


def test_the_lying_display_is_evaluated_but_its_digest_is_refused_by_the_dispatcher() -> None:
    real = args(250_000)
    s = scenario().when(propose(real, display=args(10)))  # the display says 10, the stored args 250000
    s.then("tool.call.proposed", "tool.call.authorized")
    why = display_mismatch(s.s.toolCalls["call-1"], real)
    assert why is not None and "amount_cents shown 10, stored 250000" in why
    honest = scenario().when(propose(args(10)))
    assert display_mismatch(honest.s.toolCalls["call-1"], args(10)) is None


def test_the_approval_token_binds_the_display_digest() -> None:
    keyring = Keyring(keys={"k1": SigningKey(b"x" * 32)}, current="k1")
    ctx = replace(CTX, verify_token=_token_check(keyring))
    s = Scenario(ctx).given(create(), propose(args(9_000)))
    approval = next(iter(s.s.approvals.values()))

    def token(digest: str | None, version_v1: bool = False) -> str:
        claims = ApprovalClaims(RUN, approval.approvalId, approval.argsHash, "approve", SUPPORT.subjectId,
                                2**62, digest)
        return issue_token(keyring, "k1", claims)

    s.when(resume(approval=approval.approvalId, args_hash_=approval.argsHash, approvalToken=token("other")))
    s.rejected("token_claims_mismatch")
    s.when(resume(approval=approval.approvalId, args_hash_=approval.argsHash, displayDigest="other"))
    s.rejected("display_changed")
    s.when(resume(approval=approval.approvalId, args_hash_=approval.argsHash,
                  approvalToken=token(approval.displayDigest), displayDigest=approval.displayDigest))
    granted = s.event("approval.granted").payload
    assert granted.displayDigest == approval.displayDigest


def _token_check(keyring: Keyring) -> Any:
    from runfacts.processors.decider.security import approval_token_check

    return approval_token_check(keyring)


OPS = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le, "==": operator.eq,
       "!=": operator.ne}


@settings(max_examples=80, deadline=None)
@given(amount=st.integers(min_value=-10, max_value=200_000), threshold=st.integers(min_value=0, max_value=100_000),
       op=st.sampled_from(sorted(OPS)), lie=st.booleans(), shown=st.integers(min_value=1, max_value=100_000))
def test_never_authorized_without_a_rule_satisfying_approval(amount: int, threshold: int, op: str, lie: bool,
                                                             shown: int) -> None:
    """Whatever the rule, the amount and the display: a call runs without a person (authorized at
    once, and its stored arguments pass the dispatcher's digest check) only if its real arguments
    are valid and the rule does not hold on them."""
    rules = ToolRegistry("p")
    rules.tool("t.credit", approval_when=[("amount_cents", op, threshold)])(credit)
    catalog = rules.catalog()
    ctx = DecideContext(capabilities=catalog, current_versions=CTX.current_versions)
    real = args(amount)
    manifest = catalog.get("t.credit")
    display = render(args(shown) if lie else real, manifest.schema_or_none(), manifest.rule_fields())
    c = command(cmd.ProposeToolCall, toolCallId="c", capabilityId="t.credit", argsHash=args_hash(real),
                argsRef="r", target="acct-700", action="credit", risk="high", summary="s", display=display)
    s = Scenario(ctx).given(create()).when(c)
    types = [e.eventType for e in s.last]
    if "tool.call.authorized" not in types:
        assert "approval.required" in types or types == ["command.rejected"]
        return  # waiting for a person, or refused before anyone was asked
    if display_mismatch(s.s.toolCalls["c"], real) is None:  # the dispatcher would run it
        assert 0 < amount <= 100_000 and not OPS[op](amount, threshold)


def test_the_packaged_refund_schema_is_the_refund_adapters_argument_model() -> None:
    from runfacts.connectors.refund_adapter import RefundArguments
    from runfacts.processors.policy.capabilities import load_capabilities

    packaged = load_capabilities().get("payments.refund").arguments()
    model = RefundArguments.model_json_schema(by_alias=True)
    model.pop("description")
    model["properties"]["amountMinor"]["unit"] = "minor units"
    assert packaged == model


def test_the_display_follows_the_declared_argument_order() -> None:
    from runfacts.processors.policy.capabilities import load_capabilities

    refund = load_capabilities().get("payments.refund")
    shown = render({"currency": "EUR", "amountMinor": 4200, "orderId": "o-1"}, refund.schema_or_none())
    assert [f.name for f in shown.fields] == ["orderId", "amountMinor", "currency"]
    assert [f.name for f in render(args(1), CREDIT.schema_or_none()).fields] == ["account", "amount_cents", "customer"]


def test_a_sealed_personal_value_passes_and_is_bound_by_the_args_hash_not_the_digest() -> None:
    """Under the privacy envelope the client seals personalValue: the decider neither reads nor
    validates it, the rule reads the clear amount, the dispatcher compares the clear values."""
    c = propose(args(9_000))
    sealed = tuple(f.model_copy(update={"personalValue": "rfe1.sealed-by-the-client"}) if f.pii else f
                   for f in c.payload.display.fields)
    c = c.model_copy(update={"payload": c.payload.model_copy(
        update={"display": c.payload.display.model_copy(update={"fields": sealed})})})
    s = scenario().when(c).then("tool.call.proposed", "approval.required", "run.paused")
    customer = {f.name: f for f in s.event("approval.required").payload.display.fields}["customer"]
    assert customer.personalValue == "rfe1.sealed-by-the-client" and customer.value is None
    assert display_mismatch(s.s.toolCalls["call-1"], args(9_000)) is None
    assert display_mismatch(s.s.toolCalls["call-1"], args(9_001)) is not None

"""The contract's limits on ids, references and amounts (runfacts.ids; docs/schemas.md; issue 33 item 6).

Before: `budget.debit` with negative amounts refilled a budget (tool calls used -1,109); empty
runId, toolCallId, argsRef and commandId, and run ids with NUL, bidi or zero-width characters,
look-alikes or 6,000 bytes were decided. Now the decider dead-letters them with a typed reason
naming the field, and every client refuses them before sending."""

from __future__ import annotations

import pytest
from decider_support import AGENT, CTX, command, create, propose_refund

from runfacts.connectors.outbox.commands import CommandEncoder
from runfacts.ids import MAX_ID_CHARS, ContractViolation, id_problem, ref_problem, violation
from runfacts.processors.decider.app import DeciderShell
from runfacts.schemas import codec
from runfacts.schemas import commands as cmd
from runfacts.schemas.common import BudgetAmounts
from runfacts.schemas.errors import InvalidInput
from runfacts.topics import TopicNames

SHELL = DeciderShell(TopicNames("ids"), CTX)
HOSTILE_IDS = {"": "is empty", "run\x00": "U+0000", "run\u202e1": "RIGHT-TO-LEFT OVERRIDE",
               "ru\u200bn": "ZERO WIDTH SPACE", "run-\u0430": "CYRILLIC SMALL LETTER A",
               "r" * (MAX_ID_CHARS + 1): "201 characters", "r" * 6000: "6000 characters", "a b": "SPACE"}


@pytest.mark.parametrize("bad", sorted(HOSTILE_IDS))
def test_id_is_refused_with_the_reason_when_outside_the_alphabet(bad: str) -> None:
    assert HOSTILE_IDS[bad] in (id_problem(bad) or "")


def test_id_and_reference_are_accepted_when_within_the_contract() -> None:
    assert [id_problem(x) for x in ("run-1", "call_abc.2:x", "r" * MAX_ID_CHARS)] == [None] * 3
    assert [ref_problem(x) for x in ("args/call-1", "alice@example.com", "Zoë Ø", "goal: refund 1")] == [None] * 4
    assert "NFC" in (ref_problem("Zoe\u0308") or "") and "U+202E" in (ref_problem("a\u202eb") or "")
    assert "space" in (ref_problem(" x") or "")


@pytest.mark.parametrize(("build", "field", "reason"), [
    (lambda: create(run=""), "runId", "invalid_id"),
    (lambda: create(run="run\u202e1"), "runId", "invalid_id"),
    (lambda: propose_refund(call=""), "payload.toolCallId", "invalid_id"),
    (lambda: propose_refund().model_copy(update={"payload": propose_refund().payload.model_copy(
        update={"argsRef": ""})}), "payload.argsRef", "invalid_ref"),
    (lambda: create().model_copy(update={"commandId": ""}), "commandId", "invalid_id"),
    (lambda: command(cmd.DebitBudget, AGENT, amounts=BudgetAmounts(toolCalls=-1109), actionHash="h"),
     "payload.amounts.toolCalls", "negative_amount"),
    (lambda: create(budget=BudgetAmounts(costMicros=-1)), "payload.budget.costMicros", "negative_amount"),
])
def test_command_is_dead_lettered_naming_the_field_when_outside_the_contract(build, field: str, reason: str) -> None:
    bad = build()
    found = violation(bad)
    assert found is not None and (found.field, found.reason) == (field, reason)
    with pytest.raises(InvalidInput) as refused:  # the decider's shell: a dead letter, never decided
        SHELL.deserialize(codec.encode(bad), list(codec.headers(bad)))
    assert refused.value.reason == reason and f"field {field}" in str(refused.value)
    with pytest.raises(ContractViolation, match=f"field {field}.*refused before sending"):
        CommandEncoder("ids.run.commands").encode(bad)  # the outbox (and DirectSender, CommandClient)


def test_command_is_accepted_when_ids_and_amounts_are_within_the_contract() -> None:
    good = [create(), propose_refund(), command(cmd.DebitBudget, AGENT, amounts=BudgetAmounts(toolCalls=1),
                                                actionHash="h")]
    assert [violation(c) for c in good] == [None] * 3
    assert [type(SHELL.deserialize(codec.encode(c), list(codec.headers(c)))) for c in good] == [type(c) for c in good]


def test_client_sends_nothing_when_one_command_is_outside_the_contract() -> None:
    from runfacts.client.sender import DirectSender
    from runfacts.settings import KafkaSettings

    sender = DirectSender(KafkaSettings(), TopicNames("ids"), None)
    try:
        with pytest.raises(ContractViolation, match="run.create: field runId: holds U\\+0000"):
            sender.send(create(run="run-ok"), create(run="run\x00"))
        assert len(sender._producer) == 0  # not even the valid one was queued
    finally:
        sender.close()

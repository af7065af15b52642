"""The dispatcher seals its reports (issue 23): with privacy keys, the tool's result, a failure's
message and `lastError` leave the dispatcher sealed for the run's user (its `userId` pseudonym),
the decider decides them as before, readers reveal them, and they read `[erased]` once the
user's keys are tombstoned. Without keys the reports are byte-for-byte as before."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from runfacts.client.outcomes import Entry, call_result
from runfacts.privacy import ERASED, KeyTable, is_protected, parse_privacy_keys, reveal_dict, subject_ref
from runfacts.privacy.fields import _apply
from runfacts.privacy.keys import new_privacy_keys_json
from runfacts.privacy.store import Protector
from runfacts.schemas.pii import pii_paths

from ..dispatcher.dispatcher_support import Loop

KEYS = parse_privacy_keys(new_privacy_keys_json("kek-d"))
CUSTOMER = "customer-42"


def _sealed_loop(tmp_path: Path, **options: Any) -> tuple[Loop, KeyTable]:
    table = KeyTable(KEYS, lambda _k, _v: None)
    return Loop(tmp_path, protect=Protector(table), **options), table


def _personal(command: Any) -> list[Any]:
    values, found = command.model_dump(mode="json"), []
    for path in pii_paths(command.commandType):
        _apply(values, path.split("."), path, lambda v, _p: found.append(v) or v)
    return [v for v in found if v]


def test_reports_are_sealed_for_the_runs_user_and_revealed_until_erased_when_keys_are_set(tmp_path: Path) -> None:
    loop, table = _sealed_loop(tmp_path)
    try:
        loop.sim.set_faults(acceptThenDropNext=1)  # a lost response: lastError, then the reconciled result
        loop.start_refund()
        sent = loop.commands()
        types = {c.commandType for c in sent}
        assert {"tool.call.report_result_unknown", "tool.call.report_reconciled"} <= types
        personal = [v for c in sent for v in _personal(c)]
        assert personal and all(is_protected(v) for v in personal), personal
        assert loop.rejections() == [] and loop.call().execution == "completed"
        ref = subject_ref(CUSTOMER, KEYS)
        reconciled = next(c for c in sent if c.commandType == "tool.call.report_reconciled")
        assert reconciled.payload.result.startswith(f"rfe1.{ref}.")  # the run's user, not the dispatcher
        events = loop.events()
        entries = [Entry(i, e) for i, e in enumerate(events)]
        value = call_result("run", entries, loop.call().toolCallId, table.view)
        assert value is not None and value.unwrap()["orderId"] == "order-001"  # what call.result() returns
        unknown = next(e for e in events if e.eventType == "tool.call.result_unknown")
        assert is_protected(unknown.payload.lastError)
        shown = reveal_dict(unknown.model_dump(), unknown.eventType, table.view())["payload"]["lastError"]
        assert shown and not is_protected(shown) and shown != "[unreadable]", shown
        table.erase(ref)
        erased = call_result("run", entries, loop.call().toolCallId, table.view)
        assert erased is not None and erased.unwrap() == ERASED
        assert reveal_dict(unknown.model_dump(), unknown.eventType, table.view())["payload"]["lastError"] == ERASED
    finally:
        loop.close()


def test_failure_message_reads_back_as_the_failed_facts_detail_when_sealed(tmp_path: Path) -> None:
    loop, table = _sealed_loop(tmp_path, max_amount_minor=100)  # the provider declines 42.00 EUR
    try:
        loop.start_refund()
        failed = next(e for e in loop.events() if e.eventType == "tool.call.failed")
        assert is_protected(failed.payload.detail)
        detail = reveal_dict(failed.model_dump(), failed.eventType, table.view())["payload"]["detail"]
        assert detail and not is_protected(detail) and detail != "[unreadable]", detail
    finally:
        loop.close()


def test_reports_stay_plain_when_no_privacy_keys_are_configured(tmp_path: Path) -> None:
    loop = Loop(tmp_path)
    try:
        loop.sim.set_faults(acceptThenDropNext=1)
        loop.start_refund()
        reconciled = next(c for c in loop.commands() if c.commandType == "tool.call.report_reconciled")
        assert json.loads(reconciled.payload.result)["orderId"] == "order-001"
        assert reconciled.actor.subjectId == "dispatcher-1000"
    finally:
        loop.close()

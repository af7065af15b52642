"""The refund demo's assertions, on a real broker with real subprocesses (decider, dispatcher,
projector, payment simulator) and a real kill -9 of the dispatcher after the provider executed."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from runfacts.connectors.payment_book import read_ledger
from runfacts.demo import DemoOptions, run_demo
from runfacts.settings import KafkaSettings

pytestmark = pytest.mark.integration


def test_demo_executes_exactly_one_refund_when_the_dispatcher_is_killed_after_the_call(
        kafka_bootstrap: str, unique: str, tmp_path: Path) -> None:
    workdir = tmp_path / "demo"
    options = DemoOptions(prefix=f"dm-{unique}", workdir=workdir, partitions=2,
                          kafka=KafkaSettings(bootstrap_servers=kafka_bootstrap))
    out = io.StringIO()
    result = run_demo(options, Console(file=out, width=140))

    assert [c.name for c in result.checks if not c.ok] == [], out.getvalue()[-4000:]
    refunds = read_ledger(workdir / "ledger.jsonl")  # the provider's own ground truth
    assert [(r.order_id, r.external_request_ids, r.status) for r in refunds] == [
        ("order-001", ("call-order-001-a1",), "succeeded")]
    refund = result.refund.state
    call = refund["toolCalls"]["call-order-001"]
    assert (refund["status"], call["execution"], call["verification"]) == (
        "completed", "completed", "confirmed_success")
    assert call["attempts"] == 1 and call["reconciliation"] == "found_completed"
    expiry = result.expiry.state
    assert (expiry["status"], expiry["statusReason"]) == ("waiting_for_review", "approval_expired")
    assert expiry["approvals"]["approval-call-order-002"]["status"] == "expired"
    assert result.expiry.facts["late_approval"] == ["approval_expired"]
    banner = result.refund.banners[0]  # read from the view topic the decider publishes
    assert banner is not None and (banner["approvalId"], banner["asks"]) == (
        "approval-call-order-001", "refund on order-001 (high risk)")
    assert result.refund.view is not None and result.refund.view["status"] == "completed"
    assert result.audit.ok and result.audit.records == result.audit.events == len(
        result.refund.audit) + len(result.expiry.audit)
    assert result.elapsed_s < 60
    assert "all checks hold" in out.getvalue()

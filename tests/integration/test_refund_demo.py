"""The refund demo's assertions, on a real broker with real subprocesses (decider, dispatcher,
projector, payment simulator) and a real kill -9 of the dispatcher after the provider executed;
then every topic the demo wrote is scanned for the configured secrets and for personal data
(issue 11): secrets nowhere; values of `"pii": true` fields only in the internal topics
(commands, events, run state and the stores' copies of it), never in the user view, the audit
trail, the trajectories, the dead letters or the projector's changelogs."""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Iterator
from typing import NamedTuple

import pytest
from confluent_kafka.admin import AdminClient
from rich.console import Console
from scan_support import personal_needles, personal_values, records, scan, secret_needles

from runfacts.demo.run import DemoOptions, DemoResult, run_demo
from runfacts.demo.stack import API_KEY, DemoStack
from runfacts.dev.provider.book import read_ledger
from runfacts.settings import KafkaSettings
from runfacts.topics import TopicNames, delete_topics

pytestmark = pytest.mark.integration


class Played(NamedTuple):
    options: DemoOptions
    result: DemoResult
    output: str


@pytest.fixture(scope="module")
def played(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Played]:
    """One demo run whose topics are kept for the module's tests, then deleted."""
    options = DemoOptions(prefix=f"dm-{uuid.uuid4().hex[:10]}", workdir=tmp_path_factory.mktemp("demo"),
                          partitions=2, keep_topics=True, kafka=KafkaSettings(bootstrap_servers=kafka_bootstrap))
    out = io.StringIO()
    try:
        yield Played(options, run_demo(options, Console(file=out, width=140)), out.getvalue())
    finally:
        delete_topics(options.kafka, _written_topics(options))


def _written_topics(options: DemoOptions) -> list[str]:
    """Every topic under the demo's prefix (its topics and its workers' changelogs)."""
    admin = AdminClient(options.kafka.client_config())
    mine = (options.prefix + ".", options.prefix + "-")
    return sorted(t for t in admin.list_topics(timeout=10).topics if t.startswith(mine))


def test_demo_executes_exactly_one_refund_when_the_dispatcher_is_killed_after_the_call(played: Played) -> None:
    result, workdir = played.result, played.options.workdir
    assert workdir is not None

    assert [c.name for c in result.checks if not c.ok] == [], played.output[-4000:]
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
    assert "all checks hold" in played.output


def test_demo_topics_hold_no_secret_anywhere_and_personal_data_only_internally_when_scanned(
        played: Played) -> None:
    options, names = played.options, TopicNames(played.options.prefix)
    topics = _written_topics(options)
    assert set(topics) == set(DemoStack(options).topic_names())  # the demo knows everything it writes
    keys = json.loads(options.approval_keys)["keys"]
    secrets = secret_needles(payment_api_key=API_KEY, dashboard_session_secret=options.session_secret,
                             audit_pii_key=options.audit_pii_key,
                             **{f"approval_key_{kid}": secret for kid, secret in keys.items()},
                             **{f"source_key_{kid}": secret for ring in json.loads(options.source_keys).values()
                                for kid, secret in ring["keys"].items()})
    written = {topic: records(options.kafka, topic) for topic in topics}
    personal = personal_values(m.value() for t in (names.commands, names.events) for m in written[t])
    assert {"customer-42", "alice"} <= personal and any("order-001" in v for v in personal)
    assert any(v.startswith('{"amountMinor":4200') for v in personal)  # the refund's result value (issue 17)
    internal = {names.commands, names.events, names.state, *_state_changelogs(options)}

    leaks = [f for topic, messages in written.items() for f in scan(topic, messages, secrets)]
    exposed = [f for topic, messages in written.items() if topic not in internal
               for f in scan(topic, messages, personal_needles(personal))]

    assert leaks == []
    assert exposed == []
    assert scan(names.state, written[names.state], {"userId": b"customer-42"})  # the scan sees what is there
    assert written[names.dlq] == []
    # every command was signed by its source (issue 20) and none was refused: the decider checked them
    unsigned = [m.offset() for m in written[names.commands] if "sourceSignature" not in dict(m.headers() or [])]
    assert written[names.commands] and unsigned == []
    for topic in (names.user_view, names.audit, names.trajectory):  # scanned, and not empty
        assert written[topic], topic


def _state_changelogs(options: DemoOptions) -> list[str]:
    """Store changelogs holding copies of run state (the dispatcher's `runs`; the decider's is
    the run-state topic itself): internal like the run-state topic."""
    return [f"{options.prefix}-dispatcher-runs-changelog"]

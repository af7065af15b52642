"""`runfacts demo`: the refund story end to end — broker, decider, dispatcher, projector, provider.

Starts what is missing (the local broker), provisions topics under a fresh prefix, runs the
payment simulator and the run decider, dispatcher and projector workers as subprocesses and
the harness's outbox relay in-process, plays the two stories of `runfacts.demo.story` (the
agent and the approving UI written on `runfacts.client`),
prints a timeline, the final user view (from the view topic) and an audit summary per run
(from the audit topic), verifies the audit trail against the events log, and exits
non-zero unless every check holds (above all: exactly one refund in the provider's ledger).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from runfacts.demo.readers import EventLog
from runfacts.demo.stack import DISPATCH_CRASH_POINT, DemoOptions, DemoStack
from runfacts.demo.story import RunStory, Story, expiry_story, killed, refund_story
from runfacts.demo.view import (
    Check,
    audit_summary,
    render_audit,
    render_banner,
    render_checks,
    render_timeline,
    render_view,
    timeline,
)
from runfacts.dev.services import LocalKafka
from runfacts.logread import ReadOptions
from runfacts.projections.audit.summary import AuditConfig
from runfacts.projections.audit.verify import VerifyReport, VerifySettings, findings_lines, verify
from runfacts.schemas import events as ev
from runfacts.settings import KafkaSettings

__all__ = ["DemoOptions", "DemoResult", "run_demo"]
QUICK_READ = ReadOptions(poll_timeout_s=0.1, client={"fetch.wait.max.ms": 20})  # small topics: answer fast


@dataclass
class DemoResult:
    """What the demo saw and whether every check held."""

    checks: list[Check]
    refund: RunStory
    expiry: RunStory
    ledger: list[dict[str, Any]]
    audit: VerifyReport
    workdir: Path
    elapsed_s: float

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)


def _ensure_broker(settings: KafkaSettings, console: Console) -> None:
    local = LocalKafka()
    if settings.bootstrap_servers == local.bootstrap and not local.is_up():
        console.print("starting the local Kafka broker (scripts/kafka.sh start)…")
        local.start()


def run_demo(options: DemoOptions, console: Console | None = None) -> DemoResult:
    """Play both stories against real processes; always stops what it started."""
    console = console or Console()
    t0 = time.time()
    _ensure_broker(options.kafka, console)
    stack = DemoStack(options)
    console.print(f"[bold]runfacts demo[/] · topics under [cyan]{options.prefix}.*[/] · logs in {options.workdir}")
    log: EventLog | None = None
    story: Story | None = None
    try:
        stack.start()
        log = EventLog(options.kafka, stack.names.events)
        story = Story(stack, log, lambda text: console.print(f"[dim]{time.time() - t0:5.1f}s[/] {text}"))
        suffix = options.prefix.rsplit("-", 1)[-1]
        console.rule("1 · refund: approval, lost response, kill -9, reconciliation")
        refund = refund_story(story, f"run-{suffix}-refund")
        console.rule("2 · refund: the approval expires before the user answers")
        expiry = expiry_story(story, f"run-{suffix}-expiry", options.approval_ttl_ms)
        ledger = stack.ledger()
        report = verify(options.kafka, VerifySettings(events_topic=stack.names.events, audit_topic=stack.names.audit,
                                                      config=AuditConfig(options.audit_pii_key.encode()),
                                                      read=QUICK_READ))
        result = DemoResult(checks(refund, expiry, ledger, log, report), refund, expiry, ledger, report,
                            stack.dir, time.time() - t0)
        _report(console, result, log, t0)
        return result
    finally:
        if story is not None:
            story.close()
        if log is not None:
            log.close()
        stack.stop()
        console.print(f"logs: {stack.dir} (decider.log, dispatcher-1.log, dispatcher-2.log, projector.log, "
                      f"payment-sim.log, relay.log, ledger.jsonl)")


def checks(refund: RunStory, expiry: RunStory, ledger: list[dict[str, Any]], log: EventLog,
           audit: VerifyReport) -> list[Check]:
    """The demo's assertions about the provider's ledger, the log, the views and the audit."""
    return [*_refund_checks(refund, ledger, log), *_expiry_checks(expiry, ledger, log),
            *_audit_checks((refund, expiry), log, audit)]


def _refund_checks(refund: RunStory, ledger: list[dict[str, Any]], log: EventLog) -> list[Check]:
    events = log.of(refund.run_id)
    types = [e.eventType for e in events]
    dispatching = [e.payload for e in events if isinstance(e, ev.ToolCallDispatching)]
    outcomes = [e.payload.outcome for e in events if isinstance(e, ev.ToolCallReconciled)]
    mine = [r for r in ledger if r["orderId"] == "order-001"]
    state = refund.state or {}
    call = state.get("toolCalls", {}).get("call-order-001", {})
    key = dispatching[0].idempotencyKey if dispatching else "?"
    facts, banners = refund.facts, refund.banners
    return [
        Check("exactly one refund in the provider's ledger", len(ledger) == 1 and len(mine) == 1,
              f"{len(ledger)} executed: " + ", ".join(f"{r['refundId']} {r['orderId']} {r['status']}" for r in ledger)),
        Check("it carries the call's idempotency key, from the first claim only",
              len(mine) == 1 and mine[0]["idempotencyKey"] == key
              and mine[0]["externalRequestIds"] == ["call-order-001-a1"], key),
        Check("dispatcher killed -9 after the provider executed the refund",
              killed(facts.get("dispatcher_exit")) and facts.get("ledger_at_crash") == 1
              and DISPATCH_CRASH_POINT in facts.get("crash_marker", ""),
              f"exit {facts.get('dispatcher_exit')}, ledger then {facts.get('ledger_at_crash')}"),
        Check("lost outcome → result_unknown → found_completed; dispatched once, never called blindly",
              len(dispatching) == 1 and types.count("tool.call.result_unknown") == 1
              and outcomes == ["found_completed"], f"dispatching {len(dispatching)}, reconciled {outcomes}"),
        Check("approval banner shown in the user view topic, and the same after a page refresh",
              len(banners) == 2 and banners[0] is not None and banners[0] == banners[1],
              str(banners[0]["approvalId"] if banners and banners[0] else None)),
        Check("final user view: completed, no banner, nothing to retry",
              refund.view is not None and (refund.view["status"], refund.view["approvalBanner"],
                                           refund.view["canRetry"]) == ("completed", None, []),
              str(refund.view["statusLine"] if refund.view else None)),
        Check("final: run completed, refund completed + confirmed_success",
              (state.get("status"), call.get("execution"), call.get("verification"))
              == ("completed", "completed", "confirmed_success"),
              f"{state.get('status')}, {call.get('execution')}, {call.get('verification')}"),
    ]


def _expiry_checks(expiry: RunStory, ledger: list[dict[str, Any]], log: EventLog) -> list[Check]:
    state = expiry.state or {}
    return [
        Check("expired approval pauses the run for re-authorization",
              "approval.expired" in [e.eventType for e in log.of(expiry.run_id)]
              and (state.get("status"), state.get("statusReason")) == ("waiting_for_review", "approval_expired"),
              f"{state.get('status')} ({state.get('statusReason')})"),
        Check("late approval rejected as approval_expired", expiry.facts.get("late_approval") == ["approval_expired"],
              str(expiry.facts.get("late_approval"))),
        Check("no refund for the expired approval", not any(r["orderId"] == "order-002" for r in ledger), ""),
        Check("no duplicate eventIds in the events log", len(log.ids) == len(set(log.ids)), f"{len(log.ids)} events"),
    ]


def _audit_checks(stories: tuple[RunStory, ...], log: EventLog, report: VerifyReport) -> list[Check]:
    per_run = [(len(s.audit), len(log.of(s.run_id)), audit_summary(s.audit).sequences_ok) for s in stories]
    return [
        Check("audit topic: one chained record per event, written live by the projector",
              all(records == events and linked for records, events, linked in per_run),
              ", ".join(f"{r}/{e} records" for r, e, _ in per_run)),
        Check("runfacts audit verify: every chain recomputes from the events log", report.ok,
              list(findings_lines(report))[-1]),
    ]


def _report(console: Console, result: DemoResult, log: EventLog, t0: float) -> None:
    for story in (result.refund, result.expiry):
        events = log.of(story.run_id)
        console.rule(story.run_id)
        console.print(render_timeline(f"timeline of {story.run_id}", timeline(events, story.notes), t0))
        console.print(render_banner(story.banners[0] if story.banners else None, "approval banner as first shown"))
        if story.view is not None:
            console.print(render_view(story.view))
        console.print(render_audit(f"audit summary of {story.run_id} (from the audit topic)",
                                   audit_summary(story.audit), len(events)))
    for line in findings_lines(result.audit):
        console.print(f"audit verify: {line}")
    console.print(render_checks(result.checks))
    verdict = "[green]all checks hold[/]" if result.ok else "[red]some checks FAILED[/]"
    console.print(f"{verdict} · {len(result.ledger)} refund(s) in the ledger · {result.elapsed_s:.1f}s")

"""The refund demo's two stories, played against the running stack, and their checks.

1. Refund: run created; reasoning recorded; refund proposed (arguments and proposal in one
   outbox transaction); policy requires approval; the user view (read from the view topic
   the decider publishes) shows the banner; a page refresh (a new read_committed consumer of
   the view topic) shows the same banner; the provider is switched to accept-then-drop;
   the user approves (a ResumeRun signed with the approval keyring); the dispatcher calls,
   the refund executes, the response is lost and the dispatcher is killed (-9) before it
   records anything; it is restarted; the call is
   result_unknown, reconciliation finds the refund -> completed; the run completes with
   verification pending; the bank settles -> confirmed_success.
2. Expiry: the approval expires before the user answers; the run pauses for
   re-authorization; a late approve is rejected (approval_expired); no refund.
"""

from __future__ import annotations

import hashlib
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import count
from typing import Any

from runfacts.demo.readers import DemoTimeout, EventLog, has, read_audit, read_state, read_view
from runfacts.demo.stack import DISPATCH_CRASH_POINT, DemoStack
from runfacts.demo.view import Entry
from runfacts.processors.decider.app import DEFAULT_VERSIONS
from runfacts.projections.audit.reducer import AuditRecord
from runfacts.schemas import commands as cmd
from runfacts.schemas import events as ev
from runfacts.schemas.common import Actor, BudgetAmounts, CommandBase, EventBase
from runfacts.schemas.models import new_command, payload_class
from runfacts.security.approvals import ApprovalRequest, sign_approval

REFUND_CAPABILITY = "payments.refund"
EXPIRING_CAPABILITY = "payments.refund.expiring"  # same refund, short approval window (demo_stack)
AGENT = Actor(subjectId="agent-harness", roles=("agent",), authSource="agent-harness")
SUPPORT = Actor(subjectId="alice", roles=("support_agent",), authSource="dashboard")
Say = Callable[[str], None]


@dataclass
class RunStory:
    """What one story observed."""

    run_id: str
    notes: list[Entry] = field(default_factory=list)
    banners: list[dict[str, Any] | None] = field(default_factory=list)
    state: dict[str, Any] | None = None
    view: dict[str, Any] | None = None
    """The final user view, as read from the view topic."""
    audit: list[AuditRecord] = field(default_factory=list)
    """The run's records in the audit topic (the projector's)."""
    facts: dict[str, Any] = field(default_factory=dict)


class Story:
    """Plays commands through the harness outbox and narrates what the log says."""

    def __init__(self, stack: DemoStack, log: EventLog, say: Say) -> None:
        self.stack = stack
        self.log = log
        self.say = say
        self._ids = count(1)

    def command(self, cls: type[CommandBase], run_id: str, actor: Actor = AGENT, **payload: Any) -> Any:
        return new_command(cls, commandId=f"{run_id}-c{next(self._ids)}", runId=run_id, actor=actor,
                           issuedAt=datetime.now(UTC), correlationId=f"{run_id}-intent",
                           payload=payload_class(cls)(**payload))

    def note(self, story: RunStory, text: str, at: float | None = None) -> None:
        story.notes.append(Entry(at or time.time(), "note", text))
        self.say(text)

    def send(self, story: RunStory, *commands: CommandBase) -> None:
        assert self.stack.harness is not None
        at = time.time()
        self.stack.harness.send(*commands)
        self.note(story, "harness → outbox: " + ", ".join(c.commandType for c in commands), at)

    def wait(self, story: RunStory, what: str, done: Callable[[list[EventBase]], bool],
             timeout: float = 30.0) -> list[EventBase]:
        return self.log.wait(story.run_id, what, done, timeout)

    def state(self, story: RunStory) -> dict[str, Any]:
        names = self.stack.names
        state = read_state(self.stack.options.kafka, names.state, story.run_id)
        if state is None:
            raise DemoTimeout(f"no state for {story.run_id} on {names.state}")
        return state

    # --- shared steps -------------------------------------------------------------------

    def open_run(self, story: RunStory, order: str, amount_minor: int,
                 capability: str = REFUND_CAPABILITY) -> str:
        """Create the run, record the reasoning, propose the refund; returns the argsHash."""
        run = story.run_id
        conclusion = f"refund {amount_minor / 100:.2f} EUR for {order}: item damaged, within 30 days"
        goal = f"goal:refund-{order}"
        self.send(story, self.command(
            cmd.CreateRun, run, goalRef=goal, goalSummary=f"Refund the damaged item of {order}",
            userId="customer-42", budget=BudgetAmounts(toolCalls=3, steps=20), versions=DEFAULT_VERSIONS),
            self.command(cmd.RecordReasoning, run, reasoningObjectId=f"reasoning-{order}", goalRef=goal,
                         evidenceRefs=(f"order:{order}", "policy:refunds-30-days", "ticket:T-5531"),
                         conclusionHash=hashlib.sha256(conclusion.encode()).hexdigest(),
                         conclusionRef=f"reasoning/{order}"))
        arguments = {"orderId": order, "amountMinor": amount_minor, "currency": "EUR"}
        assert self.stack.harness is not None
        at = time.time()
        stored = self.stack.harness.propose(lambda ref, digest: self.command(
            cmd.ProposeToolCall, run, toolCallId=f"call-{order}", capabilityId=capability,
            reasoningObjectId=f"reasoning-{order}", argsHash=digest, argsRef=ref, target=order,
            action="refund", risk="high", summary=f"Refund {amount_minor / 100:.2f} EUR for {order}"), arguments)
        self.note(story, f"harness → outbox: tool.call.propose (arguments stored as {stored.ref[:20]}…, "
                         "same SQLite transaction)", at)
        self.wait(story, "the approval request", has("run.paused", reason="waiting_for_approval"))
        self.note(story, f"policy: {capability} is high risk → approval required, run paused")
        return stored.hash

    def view(self, story: RunStory) -> dict[str, Any]:
        names = self.stack.names
        view = read_view(self.stack.options.kafka, names.user_view, story.run_id)
        if view is None:
            raise DemoTimeout(f"no user view for {story.run_id} on {names.user_view}")
        return view

    def banner_twice(self, story: RunStory) -> None:
        """The view shows the banner; a page refresh (new consumer) shows the same one."""
        for where in ("view", "page refresh"):
            view = self.view(story)
            story.banners.append(view["approvalBanner"])
            self.note(story, f"{where}: a new read_committed consumer read {self.stack.names.user_view} "
                             f"(version {view['version']}) → banner {'shown' if story.banners[-1] else 'MISSING'}")

    def approve(self, story: RunStory, approval_id: str, args_hash: str) -> None:
        """The support agent approves: a ResumeRun carrying a token signed like the dashboard signs."""
        now = datetime.now(UTC)
        token = sign_approval(ApprovalRequest(story.run_id, approval_id, args_hash, "approve", SUPPORT.subjectId),
                              int(now.timestamp() * 1000), environ=self.stack.options.signing_env)
        self.send(story, self.command(cmd.ResumeRun, story.run_id, SUPPORT, approvalId=approval_id,
                                      decision="approve", argsHash=args_hash, approvalToken=token))

    def finish(self, story: RunStory) -> None:
        """The final state and user view, and the audit records once the projector caught up."""
        story.state = self.state(story)
        story.view = self.view(story)
        events = len(self.log.of(story.run_id))
        deadline = time.monotonic() + 30
        while len(story.audit) < events:
            if time.monotonic() > deadline:
                raise DemoTimeout(f"the audit topic holds {len(story.audit)} records for {story.run_id}, "
                                  f"the events log {events} events")
            story.audit = read_audit(self.stack.options.kafka, self.stack.names.audit, story.run_id)
            if len(story.audit) < events:
                time.sleep(0.2)
        self.note(story, f"audit: {len(story.audit)} records in {self.stack.names.audit} for {events} events")


def refund_story(story: Story, run_id: str) -> RunStory:
    """Story 1 (see the module docstring)."""
    s = RunStory(run_id)
    digest = story.open_run(s, "order-001", 4200)
    story.banner_twice(s)
    story.stack.provider("POST", "/_faults", {"acceptThenDropNext": 1, "pending": True})
    story.note(s, "provider switched: accept-then-drop-the-response, refunds settle later (pending)")
    story.approve(s, "approval-call-order-001", digest)
    _killed_and_restarted(story, s)
    story.wait(s, "reconciliation", has("tool.call.reconciled", outcome="found_completed"))
    story.wait(s, "verification pending", has("verification.updated", status="pending"))
    story.note(s, "result_unknown → reconciliation by externalRequestId found the refund → completed")
    story.send(s, story.command(cmd.CompleteRun, run_id, outcomeRef="outcome/refund-order-001"))
    story.wait(s, "run completion", has("run.completed"))
    refund = _refund_of(story, "order-001")
    story.stack.provider("POST", "/_settle", {"refundId": refund["refundId"], "outcome": "succeeded"})
    story.note(s, f"the bank settled {refund['refundId']} (simulator /_settle)")
    story.wait(s, "confirmed_success", has("verification.updated", status="confirmed_success"))
    story.note(s, "the dispatcher's verification poll saw it → confirmed_success")
    story.finish(s)
    return s


def _killed_and_restarted(story: Story, s: RunStory) -> None:
    """The armed dispatcher dies at its crash point after the call; start a new incarnation."""
    code = story.stack.wait_exit("dispatcher", 30)
    s.facts["dispatcher_exit"] = code
    s.facts["crash_marker"] = _read(story.stack.dir / "crash.marker")
    s.facts["ledger_at_crash"] = len(story.stack.ledger())
    story.note(s, f"dispatcher called the provider; ledger now holds {s.facts['ledger_at_crash']} refund; "
                  f"the response was dropped; dispatcher killed (exit {code}, SIGKILL at {DISPATCH_CRASH_POINT}) "
                  "before recording anything")
    story.stack.forget("dispatcher")
    story.stack.start_dispatcher()
    story.note(s, "dispatcher restarted (a new incarnation: a new, greater lease epoch)")


def expiry_story(story: Story, run_id: str, ttl_ms: int) -> RunStory:
    """Story 2 (see the module docstring)."""
    s = RunStory(run_id)
    digest = story.open_run(s, "order-002", 1990, EXPIRING_CAPABILITY)
    story.banner_twice(s)
    story.note(s, f"nobody answers for {ttl_ms / 1000:.0f}s …")
    story.wait(s, "the approval's expiry", has("run.paused", reason="approval_expired"), ttl_ms / 1000 + 30)
    story.note(s, "approval expired → run paused for re-authorization")
    story.approve(s, "approval-call-order-002", digest)
    events = story.wait(s, "the late approval's rejection", has("command.rejected", commandType="run.resume"))
    s.facts["late_approval"] = [e.payload.reasonCode for e in events if isinstance(e, ev.CommandRejected)]
    story.note(s, f"late approve rejected: {s.facts['late_approval'][-1]}")
    story.finish(s)
    return s


def _refund_of(story: Story, order: str) -> dict[str, Any]:
    return next(r for r in story.stack.ledger() if r["orderId"] == order)


def _read(path: Any) -> str:
    return path.read_text().strip() if path.exists() else ""


def killed(code: int | None) -> bool:
    return code == -signal.SIGKILL

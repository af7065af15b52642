"""The refund demo's two stories, played against the running stack, and their checks.

The agent and the support agent's UI are written on the public API, `runfacts.client`: one
client in outbox mode on the harness's SQLite file (the stack's relay publishes it); the story
reads the events log only to narrate and check what the client hides.

1. Refund: run created; reasoning recorded; refund proposed (arguments and proposal in one
   outbox transaction); policy requires approval; the user view (read from the view topic
   the decider publishes) shows the banner; a page refresh (a new read_committed consumer of
   the view topic) shows the same banner; the provider is switched to accept-then-drop;
   the user approves (`decide`: a ResumeRun signed with the approval keyring); the dispatcher calls,
   the refund executes, the response is lost and the dispatcher is killed (-9) before it
   records anything; it is restarted; the call is
   result_unknown, reconciliation finds the refund -> completed, and `call.result()` returns
   the refund to the agent; the run completes with verification pending; the bank settles ->
   confirmed_success.
2. Expiry: the approval expires before the user answers (`call.result()` raises
   ApprovalExpired); the run pauses for re-authorization; a late approve is rejected
   (approval_expired); no refund.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from runfacts.client import (
    Approval,
    ApprovalExpired,
    ClientSettings,
    CommandRejected,
    Run,
    Runfacts,
    ToolCall,
    UiSettings,
)
from runfacts.demo.readers import DemoTimeout, EventLog, has, read_audit, read_state, read_view
from runfacts.demo.stack import DISPATCH_CRASH_POINT, DemoStack
from runfacts.demo.view import Entry
from runfacts.projections.audit import AuditRecord
from runfacts.schemas.common import Actor, EventBase

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
    """Plays the agent and the UI through `runfacts.client` and narrates what the log says."""

    def __init__(self, stack: DemoStack, log: EventLog, say: Say) -> None:
        self.stack = stack
        self.log = log
        self.say = say
        signing = {**stack.options.signing_env, **stack.options.privacy_env}  # tokens bind the pseudonym
        settings = ClientSettings(agent=AGENT.subjectId, ui=UiSettings(signing_env=signing),
                                  timeout_s=stack.options.client_timeout_s)
        self.rf = Runfacts.connect(kafka=stack.options.kafka, prefix=stack.names.prefix,
                                   outbox=stack.dir / "harness.db", relay=False, settings=settings,
                                   sources=stack.options.client_sources(), privacy_env=stack.options.privacy_env,
                                   capabilities=stack.dir / "capabilities.toml")  # displays as the decider checks

    def close(self) -> None:
        self.rf.close()

    def note(self, story: RunStory, text: str, at: float | None = None) -> None:
        story.notes.append(Entry(at or time.time(), "note", text))
        self.say(text)

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
                 capability: str = REFUND_CAPABILITY) -> tuple[Run, ToolCall, Approval]:
        """Create the run, record the reasoning, propose the refund; the call and its approval."""
        at = time.time()
        goal = f"goal:refund-{order}"
        run = self.rf.start_run(goal=goal, summary=f"Refund the damaged item of {order}", user_id="customer-42",
                                budget={"toolCalls": 3, "steps": 20}, run_id=story.run_id)
        run.reason(f"refund {amount_minor / 100:.2f} EUR for {order}: item damaged, within 30 days",
                   evidence=[f"order:{order}", "policy:refunds-30-days", "ticket:T-5531"],
                   ref=f"reasoning/{order}", reasoning_id=f"reasoning-{order}")
        self.note(story, f"agent (runfacts.client) → outbox: run.create, reasoning.record (run at version "
                         f"{run.version})", at)
        at = time.time()
        call = run.propose(capability, {"orderId": order, "amountMinor": amount_minor, "currency": "EUR"},
                           target=order, action="refund", risk="high", tool_call_id=f"call-{order}",
                           summary=f"Refund {amount_minor / 100:.2f} EUR for {order}")
        self.note(story, f"agent → outbox: tool.call.propose (arguments stored as args-{call.args_hash[:15]}…, "
                         "same SQLite transaction)", at)
        [approval] = [a for a in self.rf.approvals(role="support_agent") if a.tool_call_id == call.id]
        self.note(story, f"policy: {capability} is high risk → approval required, run paused; the UI lists "
                         f"“{approval.asks}”")
        return run, call, approval

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

    def approve(self, story: RunStory, approval: Approval) -> int | None:
        """The support agent approves in the UI: `decide` signs a ResumeRun bound to the argsHash."""
        at = time.time()
        version = self.rf.decide(approval, "approve", approver=SUPPORT)
        self.note(story, f"UI → outbox: run.resume approve by {SUPPORT.subjectId} (signed, bound to argsHash "
                         f"{approval.args_hash[:12]}…), decided at version {version}", at)
        return version

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
    run, call, approval = story.open_run(s, "order-001", 4200)
    story.banner_twice(s)
    story.stack.provider("POST", "/_faults", {"acceptThenDropNext": 1, "pending": True})
    story.note(s, "provider switched: accept-then-drop-the-response, refunds settle later (pending)")
    story.approve(s, approval)
    _killed_and_restarted(story, s)
    s.facts["result"] = refund = call.result(timeout=60)
    story.note(s, f"result_unknown → reconciliation by externalRequestId found the refund → call.result() "
                  f"returned {refund['refundId']} to the agent")
    story.wait(s, "verification pending", has("verification.updated", status="pending"))
    version = run.complete(outcome="outcome/refund-order-001")
    story.note(s, f"agent → outbox: run.complete (version {version})")
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
    _run, call, approval = story.open_run(s, "order-002", 1990, EXPIRING_CAPABILITY)
    story.banner_twice(s)
    story.note(s, f"nobody answers for {ttl_ms / 1000:.0f}s …")
    try:
        call.result(timeout=ttl_ms / 1000 + 30)
    except ApprovalExpired:
        story.note(s, "approval expired → call.result() raised ApprovalExpired")
    story.wait(s, "the approval's expiry", has("run.paused", reason="approval_expired"))
    story.note(s, "the log says: run paused for re-authorization")
    try:
        story.approve(s, approval)
    except CommandRejected as late:
        s.facts["late_approval"] = [late.reason]
        story.note(s, f"late approve rejected: {late.reason}")
    story.wait(s, "the late approval's rejection", has("command.rejected", commandType="run.resume"))
    story.finish(s)
    return s


def _read(path: Any) -> str:
    return path.read_text().strip() if path.exists() else ""


def killed(code: int | None) -> bool:
    return code == -signal.SIGKILL

"""The operator console's stories as commands: the refund with a lost response (reconciled,
then confirmed by the bank) and the approval that expired, for the run page's tests.

Each story is the commands the agent, the support agent and the dispatcher would send, issued
at `at` (one second apart), so the real decider (or `Scenario`) turns them into facts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from importlib import resources
from pathlib import Path
from typing import Any

from decider_support import (
    AGENT,
    DISPATCHER,
    REFUND_HASH,
    SUPPORT,
    claim,
    command,
    completed,
    create,
    propose_refund,
    reconciled,
    resume,
    unknown,
)

from runfacts.processors.policy.access import Policy, load_policy
from runfacts.processors.policy.retry import idempotency_key
from runfacts.schemas import commands as cmd
from runfacts.schemas.common import CommandBase
from runfacts.security.identity import hash_secret


def _clock(at: datetime | None) -> Any:
    start = at or datetime.now(UTC)
    step = iter(range(1, 10_000))
    return lambda: start + timedelta(milliseconds=10 * next(step))


def key_of(run: str) -> str:
    """The refund's idempotency key in `run`."""
    return idempotency_key(run, "refund", "order-001", REFUND_HASH)


def refund_story(run: str, at: datetime | None = None, call: str = "tool-call-031",
                 tenant: str | None = None) -> list[CommandBase]:
    """create, turn 1, propose a refund (approval), approve, claim, response lost
    (result_unknown -> reconciliation requested), reconciled found_completed, verification
    pending then confirmed_success, turn 1 completes, the run completes."""
    t = _clock(at)
    key = {"run": run}
    return [
        create(at=t(), tenant=tenant, **key),
        command(cmd.StartTurn, AGENT, at=t(), turnId=f"{run}-turn-1", **key),
        propose_refund(call, at=t(), **key),
        resume(approval=f"approval-{call}", actor=SUPPORT, at=t(), **key),
        claim(call, at=t(), key=key_of(run), **key),
        unknown(call, at=t(), **key),
        reconciled("found_completed", call, at=t(), resultRef="refund-1", resultHash="h1", **key),
        command(cmd.ReportVerification, DISPATCHER, at=t(), toolCallId=call, status="pending", **key),
        command(cmd.ReportVerification, DISPATCHER, at=t(), toolCallId=call, status="confirmed_success",
                evidenceRef="bank-statement-7", **key),
        command(cmd.CompleteTurn, AGENT, at=t(), turnId=f"{run}-turn-1", **key),
        command(cmd.CompleteRun, AGENT, at=t(), **key),
    ]


def completed_story(run: str, at: datetime | None = None, call: str = "tool-call-031") -> list[CommandBase]:
    """A plain refund: approved, claimed, completed."""
    t = _clock(at)
    return [create(at=t(), run=run), propose_refund(call, at=t(), run=run),
            resume(approval=f"approval-{call}", at=t(), run=run), claim(call, at=t(), key=key_of(run), run=run),
            completed(call, at=t(), run=run)]


def expiry_story(run: str, at: datetime, call: str = "tool-call-031", tenant: str | None = None) -> list[CommandBase]:
    """A refund approved but claimed after its grant expired (approval TTL 15 min): the
    approval expires and the run waits for re-authorization (waiting_for_review)."""
    late = at + timedelta(minutes=16)
    return [create(at=at, run=run, tenant=tenant), propose_refund(call, at=at + timedelta(seconds=1), run=run),
            resume(approval=f"approval-{call}", at=at + timedelta(seconds=2), run=run),
            claim(call, at=late, key=key_of(run), run=run)]


# who looks at the console: name -> (roles, tenant); password "<name>-pw-1"
PEOPLE = {"alice": ("support_agent", "acme"), "gina": ("support_agent", "globex"), "olga": ("operator", None),
          "sam": ("supervisor", "acme"), "audrey": ("auditor", "acme"),
          "rita": ("memory_reviewer", "acme")}


def password(name: str) -> str:
    return f"{name}-pw-1"


def write_people(path: Path) -> Path:
    lines = []
    for name, (role, tenant) in PEOPLE.items():
        lines += [f"[users.{name}]", f'roles = ["{role}"]', f'password = "{hash_secret(password(name))}"']
        lines += [f'tenant = "{tenant}"'] if tenant else []
    path.write_text("\n".join(lines) + "\n")
    return path


def reauthorizing_policy(path: Path) -> Policy:
    """The packaged policy, but supervisors may propose a call again (re-authorization)."""
    text = resources.files("runfacts.processors.policy").joinpath("policy.toml").read_text()
    rule = '"tool.call.propose" = { roles = ["agent"] }'
    assert rule in text
    path.write_text(text.replace(rule, '"tool.call.propose" = { roles = ["agent", "supervisor"] }'))
    return load_policy(path)

"""Commands for the full run-state reduction benchmark: the real run decider on the engine.

Each run: CreateRun, then tool calls of a low-risk capability (ProposeToolCall,
ClaimToolCall, ReportToolCompleted), round-robin over the runs so every batch touches many
runs. Built from the wire models (runfacts.schemas) and encoded with the codec, so the
engine decodes, decides, folds, stores and emits exactly as in production.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from runfacts.processors.decider.core import DecideContext, decide_evolve
from runfacts.processors.policy.approvals import Keyring, SigningKey
from runfacts.processors.policy.capabilities import parse_capabilities
from runfacts.processors.policy.retry import args_hash, idempotency_key
from runfacts.processors.policy.sources import SourceKeys, sign
from runfacts.schemas import codec
from runfacts.schemas import commands as cmd
from runfacts.schemas.common import Actor, BudgetAmounts, RunVersions

MANIFEST = """
[[capability]]
capabilityId = "orders.lookup"
risk = "low"
requiredRole = "agent"
needsApproval = false
reconciliationDeadlineMs = 60000
[capability.retry]
maxAttempts = 3
baseBackoffMs = 100
maxBackoffMs = 1000
deadlineMs = 10000
"""
VERSIONS = RunVersions(stateSchema="1", modelRoute="route-a", toolManifest="tm-1", policy="p-1")
CTX = DecideContext(capabilities=parse_capabilities(MANIFEST), current_versions=VERSIONS)
USER = Actor(subjectId="user-7", roles=("user",), authSource="dashboard")
AGENT = Actor(subjectId="agent-harness", roles=("agent",), authSource="agent-harness")
DISPATCHER = Actor(subjectId="dispatcher-1", roles=("dispatcher",), authSource="dispatcher")
SOURCE_KEYS = SourceKeys({source: Keyring(keys={f"{source}-bench": SigningKey(source.encode().ljust(32, b"k"))},
                                          current=f"{source}-bench")
                          for source in ("dashboard", "agent-harness", "dispatcher")})
"""Bench-only keys (not secrets): the signed decider run verifies every command with them."""


def _command(cls, actor, run, n, at, **payload):
    payload_cls = cls.model_fields["payload"].annotation
    return cls(commandId=f"{run}-c{n}", runId=run, actor=actor, issuedAt=at,
               correlationId=f"{run}-corr", payload=payload_cls(**payload))


def run_commands(run: str, calls: int, start: datetime) -> list:
    """CreateRun + `calls` × (propose, claim, complete) for one run."""
    at = start
    out = [_command(cmd.CreateRun, USER, run, 0, at, goalRef="goal-1", goalSummary="look up",
                    userId="customer-42", budget=BudgetAmounts(toolCalls=2 * calls + 10,
                                                               steps=20 * calls + 100),
                    versions=VERSIONS)]
    for i in range(calls):
        call, target = f"tc-{i}", f"order-{i:04d}"
        digest = args_hash({"orderId": target})
        steps = (
            (cmd.ProposeToolCall, AGENT, dict(toolCallId=call, capabilityId="orders.lookup",
                                              argsHash=digest, argsRef=f"args/{call}",
                                              target=target, action="lookup", risk="low",
                                              summary=f"look up {target}")),
            (cmd.ClaimToolCall, DISPATCHER, dict(toolCallId=call, attempt=1,
                                                 idempotencyKey=idempotency_key(
                                                     run, "lookup", target, digest),
                                                 externalRequestId=f"req-{run}-{call}",
                                                 leaseEpoch=1)),
            (cmd.ReportToolCompleted, DISPATCHER, dict(toolCallId=call, attempt=1,
                                                       externalRequestId=f"req-{run}-{call}",
                                                       resultRef=f"res-{call}", resultHash="h")),
        )
        for cls, actor, payload in steps:
            at += timedelta(milliseconds=50)
            out.append(_command(cls, actor, run, len(out), at, **payload))
    return out


def generate(commands: int, runs: int, start: datetime | None = None) -> list[tuple[bytes, bytes]]:
    """About `commands` encoded commands over `runs` runs, interleaved round-robin.

    `start` (default: now) is the first issuedAt: commands issued long before the broker
    appends them would all be re-stamped with the append time (`effective_command`), which
    production commands, sent as they are issued, never are.
    """
    t0 = start or datetime.now(UTC).replace(microsecond=0)
    calls = max(1, (commands // runs - 1) // 3)
    per_run = [run_commands(f"run-{r:05d}", calls, t0 + timedelta(seconds=r)) for r in range(runs)]
    pairs = []
    for i in range(max(len(c) for c in per_run)):
        for cmds in per_run:
            if i < len(cmds):
                pairs.append((cmds[i].runId.encode(), codec.encode(cmds[i])))
    return pairs


def events_per_command(pairs: list[tuple[bytes, bytes]]) -> float:
    """How many events the decider emits per command of this load (decided here, in memory)."""
    states: dict[str, object] = {}
    events = 0
    for _key, value in pairs:
        command = codec.decode(value)
        emitted, states[command.runId] = decide_evolve(command, states.get(command.runId), CTX)
        events += len(emitted)
    return events / len(pairs)


def signature_headers(pairs: list[tuple[bytes, bytes]]) -> list[list[tuple[str, bytes]]]:
    """Each command's source signature headers, as its source would sign it."""
    return [sign(SOURCE_KEYS, codec.decode(value).actor.authSource, value) for _key, value in pairs]

"""A scripted generator of realistic run logs (tests, golden logs, benchmarks).

`RunScript(seed).events(run_index)` yields one run's events as plain dicts, in the order
the run decider would append them: create, start, turns of reasoning and tool calls (some
needing approval, some failing, some losing their response and being reconciled),
verification, progress, checkpoints, budget debits, an ending, feedback, sometimes an
archive. `encode_event` frames a dict like the codec does (single-object encoding), with
compiled writers, so generating 200k events takes seconds. Deterministic per seed; not a
decider: it does not check the rules, it writes plausible histories.
"""

from __future__ import annotations

import random
from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any, TypedDict

from confluent_kafka import Producer

from runfacts.partitioning import partition_for
from runfacts.schemas.binary.readers import Writer
from runfacts.schemas.binary.writers import compile_writer
from runfacts.schemas.catalog import default_catalog
from runfacts.schemas.codec import SINGLE_OBJECT_MARKER
from runfacts.schemas.errors import InfrastructureError
from runfacts.settings import KafkaSettings

BASE_MS = 1_714_564_800_000
VERSIONS = {"stateSchema": "graph-3", "modelRoute": "route-a", "toolManifest": "tools-7",
            "policy": "policy-2"}


@cache
def _writer(event_type: str) -> tuple[bytes, Writer]:
    entry = default_catalog().by_type[event_type]
    return SINGLE_OBJECT_MARKER + entry.fingerprint, compile_writer(entry.raw)


def encode_event(event: dict[str, Any]) -> bytes:
    """Single-object-encoded bytes of an event dict under its type's current schema."""
    prefix, write = _writer(event["eventType"])
    return prefix + write(event)


def _result(call: str) -> str:
    """The canonical JSON result value a tool call of the script returns."""
    return f'{{"refundId":"rf-{call}","status":"succeeded"}}'


@dataclass
class _Run:
    run_id: str
    rng: random.Random
    clock: int
    n: int = 0
    turn: str | None = None
    turn_number: int = 0


@dataclass(frozen=True)
class RunScript:
    """Plausible run histories; `turns` bounds turns per run."""

    seed: int = 1
    turns: tuple[int, int] = (2, 5)
    producer: str = "run-decider"

    def events(self, index: int) -> Iterator[dict[str, Any]]:
        """The events of run number `index`."""
        rng = random.Random(f"{self.seed}/{index}")
        run = _Run(f"run-{self.seed}-{index:06d}", rng, BASE_MS + index * 10_000)
        yield self._event(run, "run.created", _created(run))
        yield self._event(run, "run.started", {"versions": dict(VERSIONS)})
        for _ in range(rng.randint(*self.turns)):
            yield from self._turn(run)
        yield from self._ending(run)

    def log(self, runs: int) -> Iterator[dict[str, Any]]:
        """Several runs, interleaved turn-by-turn like concurrent runs are."""
        streams = [self.events(i) for i in range(runs)]
        while streams:
            for stream in list(streams):
                for _ in range(4):
                    item = next(stream, None)
                    if item is None:
                        streams.remove(stream)
                        break
                    yield item

    def _event(self, run: _Run, event_type: str, payload: dict[str, Any],
               **envelope: Any) -> dict[str, Any]:
        run.n += 1
        run.clock += run.rng.randint(5, 900)
        entry = default_catalog().by_type[event_type]
        return {"eventId": f"{run.run_id}/cmd-{run.n}/0", "eventType": event_type,
                "runId": run.run_id, "turnId": run.turn, "producer": self.producer,
                "reasoningObjectId": envelope.get("reasoning"),
                "capabilityId": envelope.get("capability"),
                "correlationId": f"corr-{run.run_id}", "causationId": f"cmd-{run.n}",
                "schemaVersion": entry.version, "occurredAt": run.clock, "payload": payload}

    def _turn(self, run: _Run) -> Iterator[dict[str, Any]]:
        run.turn_number += 1
        run.turn = f"{run.run_id}/turn-{run.turn_number}"
        yield self._event(run, "turn.started", {"turnNumber": run.turn_number})
        for step in range(run.rng.randint(1, 2)):
            reasoning = f"{run.turn}/reasoning-{step}"
            yield self._event(run, "reasoning.recorded", _reasoning(run, reasoning),
                              reasoning=reasoning)
            yield self._event(run, "budget.debited", _debit(run, tokens=run.rng.randint(200, 4000)))
            if run.rng.random() < 0.8:
                yield from self._tool_call(run, reasoning, step)
        yield self._event(run, "progress.updated", {
            "verifiedItems": [f"item-{i}" for i in range(run.turn_number - 1)],
            "openItems": [f"item-{run.turn_number}"], "nextSafeAction": "continue"})
        yield self._event(run, "checkpoint.saved", {
            "node": f"node-{run.turn_number}", "stateHash": _hash(run, "state"),
            "versions": dict(VERSIONS)})
        yield self._event(run, "turn.completed", {"turnNumber": run.turn_number})

    def _tool_call(self, run: _Run, reasoning: str, step: int) -> Iterator[dict[str, Any]]:
        call = f"{run.turn}/call-{step}"
        args_hash = _hash(run, "args")
        risk = run.rng.choice(["low", "low", "medium", "high"])
        env = {"reasoning": reasoning, "capability": "payments.refund"}
        yield self._event(run, "tool.call.proposed", {
            "toolCallId": call, "argsHash": args_hash, "argsRef": f"args/{call}",
            "target": f"order-{run.rng.randint(1, 999):03d}", "action": "refund", "risk": risk,
            "summary": f"Refund {run.rng.randint(5, 500)} EUR to the customer", "businessKey": None,
            "display": None, "displayDigest": None}, **env)
        approved = True
        if risk == "high":
            approved = yield from self._approval(run, call, args_hash)
        else:
            yield self._event(run, "tool.call.authorized", {
                "toolCallId": call, "argsHash": args_hash, "approvalId": None, "leaseEpoch": None})
        if approved:
            yield from self._dispatch(run, call, env)

    def _approval(self, run: _Run, call: str, args_hash: str) -> Generator[dict[str, Any], None, bool]:
        """The approval events of a high-risk call; returns whether it was granted."""
        approval = f"approval-{call}"
        ids = {"approvalId": approval, "toolCallId": call}
        yield self._event(run, "approval.required", {
            **ids, "argsHash": args_hash, "risk": "high", "requiredRole": "approver",
            "expiresAt": run.clock + 3_600_000, "summary": "Allow a refund above the limit", "display": None,
            "displayDigest": None, "proposedBy": None})
        yield self._event(run, "run.paused", {"reason": "waiting_for_approval", "detail": "",
                                              "approvalId": approval, "actor": None})
        granted = run.rng.random() < 0.85
        kind = "approval.granted" if granted else "approval.rejected"
        yield self._event(run, kind, {**ids, "argsHash": args_hash, "actor": _actor(run),
                                      **({"displayDigest": None} if granted else {})})
        if granted:
            yield self._event(run, "tool.call.authorized", {
                "toolCallId": call, "argsHash": args_hash, "approvalId": approval,
                "leaseEpoch": None})
        else:
            yield self._event(run, "tool.call.failed", {
                "toolCallId": call, "attempt": 0, "externalRequestId": "", "retryable": False,
                "errorClass": "approval_rejected", "detail": "", "retryAfterMs": None})
        yield self._event(run, "run.resumed", {"approvalId": approval, "actor": _actor(run)})
        if granted:
            yield self._event(run, "approval.consumed", ids)
        return granted

    def _dispatch(self, run: _Run, call: str, env: dict[str, str]) -> Iterator[dict[str, Any]]:
        ext = {"toolCallId": call, "attempt": 1, "externalRequestId": f"ext-{call}"}
        yield self._event(run, "tool.call.dispatching", {
            "toolCallId": call, "attempt": 1, "idempotencyKey": f"refund:{call}",
            "externalRequestId": ext["externalRequestId"], "leaseEpoch": 3}, **env)
        yield self._event(run, "budget.debited", _debit(run, tool_calls=1))
        yield self._event(run, "tool.call.accepted", ext, **env)
        roll = run.rng.random()
        if roll < 0.75:
            yield self._event(run, "tool.call.completed", {
                **ext, "resultRef": f"result/{call}", "resultHash": _hash(run, "result"),
                "result": _result(call)}, **env)
            yield from self._verify(run, call)
        elif roll < 0.9:
            yield self._event(run, "tool.call.failed", {
                **ext, "errorClass": "rate_limited", "retryable": True,
                "detail": "429 from provider", "retryAfterMs": 500}, **env)
        else:
            yield from self._unknown(run, call, ext, env)

    def _unknown(self, run: _Run, call: str, ext: dict[str, Any],
                 env: dict[str, str]) -> Iterator[dict[str, Any]]:
        yield self._event(run, "tool.call.result_unknown", {**ext, "lastError": "timeout"}, **env)
        yield self._event(run, "tool.call.reconciliation_requested", {
            "toolCallId": call, "externalRequestId": ext["externalRequestId"],
            "deadline": run.clock + 600_000})
        yield self._event(run, "tool.call.reconciled", {
            "toolCallId": call, "externalRequestId": ext["externalRequestId"],
            "outcome": "found_completed", "resultRef": f"result/{call}",
            "resultHash": _hash(run, "result"), "result": _result(call)})
        yield from self._verify(run, call)

    def _verify(self, run: _Run, call: str) -> Iterator[dict[str, Any]]:
        yield self._event(run, "verification.updated", {
            "toolCallId": call, "status": "pending", "evidenceRef": None})
        if run.rng.random() < 0.7:
            yield self._event(run, "verification.updated", {
                "toolCallId": call, "status": "confirmed_success",
                "evidenceRef": f"ledger/{call}"})

    def _ending(self, run: _Run) -> Iterator[dict[str, Any]]:
        run.turn = None
        if run.rng.random() < 0.9:
            yield self._event(run, "run.completed", {"outcomeRef": f"outcome/{run.run_id}",
                                                     "pendingVerifications": []})
        else:
            yield self._event(run, "run.failed", {"errorClass": "tool_unavailable",
                                                  "detail": "provider down"})
        yield self._event(run, "feedback.recorded", {
            "feedbackId": f"fb-{run.run_id}", "rating": run.rng.randint(1, 5),
            "comment": "Quick and correct", "targetTurnId": None, "targetToolCallId": None,
            "targetReasoningObjectId": None, "actor": _actor(run)})
        if run.rng.random() < 0.3:
            yield self._event(run, "run.archived", {"checkpointRef": f"ckpt/{run.run_id}"})


def _created(run: _Run) -> dict[str, Any]:
    return {"goalRef": f"goal/{run.run_id}", "goalSummary": "Refund the duplicate charge",
            "userId": f"user-{run.rng.randint(1, 5000)}@example.com", "tenant": "acme",
            "budget": {"steps": 200, "toolCalls": 50, "tokens": 500_000, "wallTimeMs": 3_600_000,
                       "costMicros": 5_000_000},
            "versions": dict(VERSIONS), "actor": _actor(run)}


def _reasoning(run: _Run, reasoning: str) -> dict[str, Any]:
    return {"goalRef": f"goal/{run.run_id}", "evidenceRefs": [f"doc/{run.rng.randint(1, 99)}"],
            "conclusionHash": _hash(run, "conclusion"), "conclusionRef": f"concl/{reasoning}"}


def _debit(run: _Run, tokens: int = 0, tool_calls: int = 0) -> dict[str, Any]:
    return {"amounts": {"steps": 1, "toolCalls": tool_calls, "tokens": tokens,
                        "wallTimeMs": run.rng.randint(10, 3000), "costMicros": tokens * 3},
            "actionHash": _hash(run, "action")}


def _actor(run: _Run) -> dict[str, Any]:
    return {"subjectId": f"user-{run.rng.randint(1, 5000)}@example.com",
            "roles": ["approver"], "tenant": "acme", "authSource": "oidc"}


def _hash(run: _Run, what: str) -> str:
    """A random 64-hex-digit digest (what sha256 hashes look like in the contract)."""
    return f"{run.rng.getrandbits(256):064x}"


def produce_log(kafka: KafkaSettings, topic: str, events: Iterable[dict[str, Any]],
                partitions: int | None = None) -> int:
    """Append events to `topic` keyed by runId (tests, benchmarks); returns how many.

    With `partitions`, each run goes to its murmur2 partition (`partition_for`, where every runfacts
    producer puts it and every consumer that folds runs expects it), computed here so the layout
    does not depend on the topic's partition count; otherwise the pinned partitioner decides.
    """
    producer = Producer(kafka.producer_config(**{
        "enable.idempotence": True, "linger.ms": 20, "batch.num.messages": 10_000,
        "compression.type": "lz4", "queue.buffering.max.messages": 500_000}))
    count = 0
    for event in events:
        key = event["runId"].encode()
        extra: _Placement = {} if partitions is None else {"partition": partition_for(key, partitions)}
        _produce(producer, topic, key, encode_event(event), extra)
        count += 1
    if producer.flush(60):
        raise InfrastructureError(f"producing to {topic}: records left undelivered",
                                  retryable=True)
    return count


class _Placement(TypedDict, total=False):
    """Keyword arguments of Producer.produce that place a record (none: the partitioner's)."""

    partition: int


def _produce(producer: Producer, topic: str, key: bytes, value: bytes,
             extra: _Placement) -> None:
    while True:
        try:
            producer.produce(topic, value, key, **extra)
            return
        except BufferError:
            producer.poll(0.05)

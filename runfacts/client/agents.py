"""Agents that recover by themselves: runs owned through the log, re-entered by replay (shell).

    @rf.agent("refunds")
    def refunds(run: Run) -> None:              # a deterministic function of the run's facts
        call = run.propose("payments.refund", order_of(run.goal), target=...)
        run.complete(outcome=f"refund:{call.result()['refundId']}")

    refunds.submit(goal="ticket:T-9001", summary="Refund order-001", user_id="customer-42")
    refunds.serve()                             # in each agent process: blocks, owns a share of the runs

Ownership: every process serving the agent joins ONE consumer group (`<prefix>-agent-<name>`)
over the events topic, whose partitions are the runs' (a run's facts live on one partition).
Kafka assigns each partition to one live process; when a process dies (kill -9), the group's
session times out (`AgentSettings.session_timeout_ms`, RUNFACTS_AGENT_SESSION_TIMEOUT_MS, 3 s by
default) and its partitions move to a live one. A broker allows no session shorter than its
`group.min.session.timeout.ms` (Kafka's default 6000 ms; the project's brokers set 1000): when it
refuses the agent's (INVALID_SESSION_TIMEOUT), the agent joins again with the broker's minimum
(read from the broker's config, else 6000) and logs a warning naming the setting, or, with
RUNFACTS_AGENT_SESSION_FALLBACK=false, fails with a ClientError naming it.

Re-entry: on assignment, every open run of the agent on an owned partition (the run-state topic,
read at once and again `RESCAN_AFTER_S` later) is read back and handed to the handler from its
start; a run created later arrives as its `run.created`. Each command the handler sends
through the run is a numbered step with a deterministic command id
`<runId>:step-<n>.<fingerprint of the command>`: a step the run's facts already record (an event
caused by that id) returns the recorded answer without sending anything, waits
(`call.result()`) answer from the recorded facts, and the first step not recorded is sent for
real. A step recorded with another fingerprint raises `ReplayDiverged` (the handler is not
deterministic). Should two processes ever run the same step (a partition moved while the
old owner still ran), the decider's command-id dedupe keeps one: both get the same answer.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource
from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from runfacts.client.errors import ClientError, ReplayDiverged, Revoked
from runfacts.client.outcomes import Entry
from runfacts.client.run import Run
from runfacts.processors.decider.state import TERMINAL
from runfacts.schemas import events as ev
from runfacts.schemas.codec import Codec
from runfacts.schemas.common import Actor, BudgetAmounts, CommandBase
from runfacts.schemas.errors import ConfigError, InvalidInput, RecordPosition
from runfacts.schemas.models import decode_event, payload_class
from runfacts.topics import group_prefix

if TYPE_CHECKING:
    from runfacts.client.core import ClientCore

log = logging.getLogger("runfacts.client.agents")
Handler = Callable[[Run], object]
VOLATILE = frozenset({"expiresAt"})
"""Payload fields left out of a step's fingerprint (computed from the clock by the client)."""
SESSION_TIMEOUT_MS = 3_000
"""The agent group's session.timeout.ms by default: a killed process's runs move within ~3-4 s."""
KAFKA_MIN_SESSION_TIMEOUT_MS = 6_000
"""Kafka's default group.min.session.timeout.ms (the broker's floor when its config is unreadable)."""
BROKER_SETTING = "group.min.session.timeout.ms"
RESCAN_AFTER_S = 3.0
"""After an assignment the open runs are read twice, at once and this much later: a run whose
`run.created` was being committed while the partition's position was set is in the second read."""


def fingerprint(cls: type[CommandBase], payload: dict[str, Any]) -> str:
    """What a step asks, in 16 hex characters: the command type and its payload."""
    body = payload_class(cls)(**payload).model_dump_json(exclude=set(VOLATILE))
    return hashlib.sha256(f"{cls.__name__}|{body}".encode()).hexdigest()[:16]


class AgentSettings(BaseSettings):
    """How an agent process holds its share of the runs (env RUNFACTS_AGENT_*)."""

    model_config = SettingsConfigDict(env_prefix="RUNFACTS_AGENT_", frozen=True, extra="ignore")

    session_timeout_ms: int = Field(default=SESSION_TIMEOUT_MS, ge=1)
    """How long a silent (killed, paused) process keeps its runs before they move to a live one.
    Lower moves runs sooner but a GC pause or a stalled host longer than this moves them too (a
    false failover: the old owner's next step raises Revoked, the decider keeps one copy of any
    step both sent). The broker must allow it: group.min.session.timeout.ms <= this."""
    heartbeat_interval_ms: int | None = Field(default=None, ge=1)
    """None: a third of the session (at least 100 ms)."""
    session_fallback: bool = True
    """When the broker refuses the session (below its group.min.session.timeout.ms): True joins
    with the broker's minimum and logs a warning; False raises ClientError naming the setting."""

    @model_validator(mode="after")
    def _heartbeat_below_session(self) -> AgentSettings:
        if self.heartbeat_interval_ms is not None and self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ConfigError("RUNFACTS_AGENT_HEARTBEAT_INTERVAL_MS", self.heartbeat_interval_ms,
                              f"must be below RUNFACTS_AGENT_SESSION_TIMEOUT_MS ({self.session_timeout_ms}); "
                              "Kafka advises a third of it")
        return self

    def group_options(self, session_timeout_ms: int | None = None) -> dict[str, int]:
        """The consumer's session and heartbeat for `session_timeout_ms` (default: the setting)."""
        session = self.session_timeout_ms if session_timeout_ms is None else session_timeout_ms
        heartbeat = self.heartbeat_interval_ms if session_timeout_ms is None else None
        if heartbeat is None or heartbeat >= session:
            heartbeat = max(100, session // 3)
        return {"session.timeout.ms": session, "heartbeat.interval.ms": heartbeat}


def session_refused(agent: str, wanted_ms: int, broker_min_ms: int | None, *, fallback: bool) -> str:
    """What to say when the broker refuses the agent group's session timeout."""
    floor = f"{broker_min_ms} ms" if broker_min_ms is not None else "unreadable here (Kafka's default is 6000 ms)"
    fix = (f"set {BROKER_SETTING}=1000 (or at most {wanted_ms}) in the broker's server.properties and "
           f"restart it (read-only: not changeable at runtime), or raise RUNFACTS_AGENT_SESSION_TIMEOUT_MS")
    if fallback:
        return (f"agent {agent}: the broker refuses session.timeout.ms={wanted_ms} (its {BROKER_SETTING} is "
                f"{floor}); joining with {broker_min_ms or KAFKA_MIN_SESSION_TIMEOUT_MS} ms, so a killed "
                f"process's runs move later; to fail over sooner {fix}")
    return (f"the broker refuses session.timeout.ms={wanted_ms} for agent {agent} (its {BROKER_SETTING} is "
            f"{floor}): {fix}; or set RUNFACTS_AGENT_SESSION_FALLBACK=true to join with the broker's minimum")


@dataclass
class Replay:
    """The step counter of a run an agent owns (on `Run.replay`)."""

    actor: Actor
    step: int = 0
    revoked: threading.Event = field(default_factory=threading.Event)

    def next(self, run: Run, cls: type[CommandBase], payload: dict[str, Any]) -> tuple[str, list[Entry]]:
        """The next step's command id and the answer the run's facts record for it (empty: not
        sent yet, send it). Raises ReplayDiverged, or Revoked once the run moved away."""
        if self.revoked.is_set():
            raise Revoked(run.id)
        n, self.step = self.step, self.step + 1
        prefix = f"{run.id}:step-{n}."
        command_id = prefix + fingerprint(cls, payload)
        recorded = [e for e in run.journal.entries if e.causation_id is not None and e.causation_id.startswith(prefix)]
        if recorded and recorded[0].causation_id != command_id:
            raise ReplayDiverged(run.id, n, f"{recorded[0].event_type} (command {recorded[0].causation_id})",
                                 f"{cls.__name__} (command {command_id})")
        return command_id, recorded


class Agent:
    """An agent service: `submit` runs to it, `serve` them in every process (see the module doc)."""

    def __init__(self, rf: ClientCore, name: str, handler: Handler) -> None:
        self.rf, self.name, self.handler = rf, name, handler
        self.actor = Actor(subjectId=name, roles=("agent",), authSource=rf.actor.authSource)
        self.codec = Codec()
        self._lock = threading.Lock()
        self._owned: set[int] = set()
        self._running: dict[str, Replay] = {}
        self._rescan: set[int] = set()
        self._late: dict[int, float] = {}
        self._stop = threading.Event()
        self._partition_of: Callable[[str], int] = lambda _run_id: 0
        self.finished: list[str] = []
        """Runs whose handler returned in this process (in order)."""
        self.session_timeout_ms: int | None = None
        """The group session serve() joined with (after any fallback to the broker's minimum)."""

    def __call__(self, run: Run) -> object:
        return self.handler(run)

    def submit(self, *, goal: str, summary: str, user_id: str, tenant: str | None = None,
               budget: BudgetAmounts | dict[str, int] | None = None, run_id: str | None = None) -> Run:
        """Create a run for this agent (idempotent on run_id); the process owning its partition
        runs the handler."""
        return self.rf.start_run(goal=goal, summary=summary, user_id=user_id, tenant=tenant, budget=budget,
                                 run_id=run_id, actor=self.actor)

    # --- serving -------------------------------------------------------------------------------

    def stop(self) -> None:
        self._stop.set()

    def open_runs(self) -> list[str]:
        """The agent's runs not ended yet (from the run states)."""
        return [s.runId for s in self.rf._states()  # noqa: SLF001 - the core's read, shared by both clients
                if s.status not in TERMINAL and not s.archived and s.createdBy.subjectId == self.name]

    def recover(self) -> list[str]:
        """Re-enter every open run of the agent now, in this thread, as a process that was just
        assigned them does (replayed: recorded steps send nothing); returns the runs handed over."""
        found = self.open_runs()
        for run_id in found:
            self._handle(run_id, Replay(self.actor), raise_errors=True)
        return found

    def serve(self, *, poll_s: float = 0.2, session_timeout_ms: int | None = None,
              settings: AgentSettings | None = None) -> None:
        """Own a share of the agent's runs until `stop()`: join the group, re-enter the open runs
        of each partition assigned, start each new run, give up the runs of revoked partitions.
        `settings` (default: from RUNFACTS_AGENT_*) set the group's session; `session_timeout_ms`
        overrides its timeout. Needs the broker (`Runfacts`); on the test stack use `recover()`."""
        rf: Any = self.rf
        if not hasattr(rf, "follower"):
            raise ClientError("-", f"agent {self.name}: serve() owns runs through Kafka's consumer group; on the "
                                   "test stack call recover() to re-enter the open runs")
        settings = settings or AgentSettings()
        if session_timeout_ms is not None:
            settings = settings.model_copy(update={"session_timeout_ms": session_timeout_ms})
        self._partition_of = rf.follower.partition_of
        group = settings.group_options()
        while not self._stop.is_set():
            refused = self._serve_group(rf, group, poll_s)
            if not refused:
                return
            broker_min = self._broker_min_session_ms(rf)
            message = session_refused(self.name, group["session.timeout.ms"], broker_min,
                                      fallback=settings.session_fallback)
            floor = broker_min or KAFKA_MIN_SESSION_TIMEOUT_MS
            if not settings.session_fallback or floor <= group["session.timeout.ms"]:
                raise ClientError("-", message)
            log.warning("%s", message)
            group = settings.group_options(floor)

    def _serve_group(self, rf: Any, group: dict[str, int], poll_s: float) -> bool:
        """Serve in the group with `group`'s session until `stop()` (False) or until the broker
        refuses the session timeout (True: nothing was owned)."""
        self.session_timeout_ms = group["session.timeout.ms"]
        consumer = Consumer(rf.kafka.client_config(**{
            "group.id": f"{group_prefix(rf.names.prefix, 'agent')}-{self.name}", "enable.auto.commit": True,
            "auto.offset.reset": "latest", "isolation.level": "read_committed", **group,
            "partition.assignment.strategy": "cooperative-sticky"}))
        consumer.subscribe([rf.names.events], on_assign=self._assigned, on_revoke=self._revoked,
                           on_lost=self._revoked)
        try:
            while not self._stop.is_set():
                for msg in consumer.consume(500, poll_s):
                    err = msg.error()
                    if err is not None and err.code() == KafkaError.INVALID_SESSION_TIMEOUT:
                        return True
                    self._record(msg)
                with self._lock:
                    todo, self._rescan = self._rescan, set()
                    now = time.monotonic()
                    todo |= {p for p, due in self._late.items() if due <= now and p in self._owned}
                    self._late = {p: due for p, due in self._late.items() if due > now}
                if todo:
                    self._reenter(todo)
            return False
        finally:
            consumer.close()

    @staticmethod
    def _broker_min_session_ms(rf: Any) -> int | None:
        """The broker's group.min.session.timeout.ms, or None when it cannot be read (no
        DescribeConfigs permission, ...)."""
        try:
            admin = AdminClient(rf.kafka.client_config())
            brokers = admin.list_topics(timeout=10).brokers
            resource = ConfigResource(ConfigResource.Type.BROKER, str(min(brokers)))
            entry = admin.describe_configs([resource])[resource].result(timeout=10).get(BROKER_SETTING)
            return int(entry.value) if entry is not None and entry.value is not None else None
        except Exception as exc:  # noqa: BLE001 - the floor is advice; Kafka's default stands in
            log.info("could not read the broker's %s: %s", BROKER_SETTING, exc)
            return None

    def _assigned(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        with self._lock:
            fresh = {p.partition for p in partitions}
            self._owned |= fresh
            self._rescan |= fresh  # now, and once more a little later: a run created while the
            self._late.update(dict.fromkeys(fresh, time.monotonic() + RESCAN_AFTER_S))  # position was set
        log.info("agent %s owns partitions %s", self.name, sorted(self._owned))

    def _revoked(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        gone = {p.partition for p in partitions}
        with self._lock:
            self._owned -= gone
            for run_id, replay in list(self._running.items()):
                if self._partition_of(run_id) in gone:
                    replay.revoked.set()
                    del self._running[run_id]

    def _reenter(self, partitions: set[int]) -> None:
        """Every open run of this agent on `partitions`, handed to the handler again."""
        for run_id in self.open_runs():
            if self._partition_of(run_id) in partitions:
                self._start(run_id)

    def _record(self, msg: Any) -> None:
        err = msg.error()
        if err is not None:
            if err.code() != KafkaError._PARTITION_EOF:
                log.warning("agent %s: %s", self.name, err)
            return
        if msg.value() is None or msg.partition() not in self._owned:
            return
        try:
            event = decode_event(self.codec, msg.value(), RecordPosition(msg.topic(), msg.partition(), msg.offset()))
        except InvalidInput as exc:
            log.warning("agent %s: skipped an unreadable fact: %s", self.name, exc)
            return
        if isinstance(event, ev.RunCreated) and event.payload.actor.subjectId == self.name:
            self._start(event.runId)

    def _start(self, run_id: str) -> None:
        with self._lock:
            if run_id in self._running:
                return
            replay = self._running[run_id] = Replay(self.actor)
        threading.Thread(target=self._handle, args=(run_id, replay), name=f"runfacts-agent-{run_id}",
                         daemon=True).start()

    def _handle(self, run_id: str, replay: Replay, raise_errors: bool = False) -> None:
        """Hand the run to the handler; in `serve`, its failure is logged (the other runs go on)."""
        try:
            run = self.rf.run(run_id)  # its facts read back: recorded steps answer from them
            run.replay = replay
            self.handler(run)
            self.finished.append(run_id)
        except Revoked:
            log.info("agent %s: run %s moved to another process", self.name, run_id)
            if raise_errors:
                raise
        except Exception:  # noqa: BLE001 - one run's handler failing never stops the others
            log.exception("agent %s: the handler of run %s failed (a diverged replay is left as it is for a "
                          "person)", self.name, run_id)
            if raise_errors:
                raise
        finally:
            with self._lock:
                if self._running.get(run_id) is replay:
                    del self._running[run_id]


__all__ = ["Agent", "AgentSettings", "Handler", "Replay", "fingerprint", "session_refused"]

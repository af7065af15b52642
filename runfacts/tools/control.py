"""Paused capabilities for the fleet (shell): the `<prefix>.tools.control` topic, read whole.

The run decider records `tool.paused` / `tool.resumed` (runId `tools-<capabilityId>`) and, in the
same transaction, writes the fact to `<prefix>.tools.control` (compacted, key capabilityId): the
last pause or resume of each capability. `fold` (pure) turns those records into the board;
`ToolControlBoard` reads the topic to its end when it opens (a dispatcher must not claim a call
of a capability paused before it started) and then follows it on a daemon thread, so a pause
reaches every dispatcher within about `poll_s` (it implements the dispatcher's `PauseBoard`
port). `pause_command` / `resume_command` build the operator's commands (`runfacts tools`).
Shell: it reads a topic (the fold and the command builders are pure).
docs/dispatcher.md "Paused capabilities".
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from datetime import datetime

from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from runfacts.logread import ReadOptions, consume_ready, consumer, partition_count, watermarks
from runfacts.processors.decider.commands.run import tool_control_run_id
from runfacts.processors.dispatcher.adapters import Pause
from runfacts.schemas import commands as cmd
from runfacts.schemas import events as ev
from runfacts.schemas.codec import Codec
from runfacts.schemas.common import Actor, EventBase
from runfacts.settings import KafkaSettings

log = logging.getLogger("runfacts.toolcontrol")


def pause_of(event: EventBase) -> tuple[str, Pause | None] | None:
    """(capabilityId, its pause or None when resumed) for a control fact; None for any other event."""
    if isinstance(event, ev.ToolPaused) and event.capabilityId:
        p = event.payload
        return event.capabilityId, Pause(event.eventId, p.actor.subjectId, p.reason, event.occurredAt)
    if isinstance(event, ev.ToolResumed) and event.capabilityId:
        return event.capabilityId, None
    return None


def fold(board: dict[str, Pause], events: Iterable[EventBase]) -> dict[str, Pause]:
    """The board after `events` in log order: a pause replaces the last one, a resume removes it."""
    out = dict(board)
    for event in events:
        found = pause_of(event)
        if found is None:
            continue
        capability, pause = found
        if pause is None:
            out.pop(capability, None)
        else:
            out[capability] = pause
    return out


def pause_command(capability_id: str, reason: str, actor: Actor, command_id: str,
                  issued_at: datetime) -> cmd.PauseTool:
    """`tool.pause` of `capability_id` (operator), under its control run id."""
    return cmd.PauseTool(commandId=command_id, runId=tool_control_run_id(capability_id), actor=actor,
                         issuedAt=issued_at, correlationId=f"ops:{command_id}",
                         payload=cmd.PauseToolPayload(capabilityId=capability_id, reason=reason))


def resume_command(capability_id: str, reason: str, actor: Actor, command_id: str,
                   issued_at: datetime) -> cmd.ResumeTool:
    """`tool.resume` of `capability_id` (operator), under its control run id."""
    return cmd.ResumeTool(commandId=command_id, runId=tool_control_run_id(capability_id), actor=actor,
                          issuedAt=issued_at, correlationId=f"ops:{command_id}",
                          payload=cmd.ResumeToolPayload(capabilityId=capability_id, reason=reason))


class ToolControlBoard:
    """The fleet's paused capabilities, from the control topic: read to its end on open, then followed."""

    def __init__(self, kafka: KafkaSettings, topic: str, *, component: str = "dispatcher",
                 timeout_s: float = 30.0, poll_s: float = 0.1, follow: bool = True) -> None:
        self.kafka, self.topic, self.component = kafka, topic, component
        self.timeout_s, self.poll_s, self.follow = timeout_s, poll_s, follow
        self._codec = Codec()
        self._board: dict[str, Pause] = {}
        self._lock = threading.Lock()
        self._open_lock = threading.Lock()
        self._opened = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def open(self) -> ToolControlBoard:
        """Read the topic to its end (at the first question, so building a worker touches no broker),
        then follow it; a missing topic is an InfrastructureError naming `runfacts topics apply`,
        so a dispatcher never claims without knowing the pauses (it stops on the record instead)."""
        with self._open_lock:
            if self._opened:
                return self
            self._consumer = consumer(self.kafka, ReadOptions(component=self.component))
            parts = [TopicPartition(self.topic, p, OFFSET_BEGINNING)
                     for p in range(partition_count(self._consumer, self.topic, self.timeout_s))]
            ends = {tp.partition: watermarks(self._consumer, tp, self.timeout_s)[1] for tp in parts}
            self._consumer.assign(parts)
            self._catch_up(ends, self.timeout_s)
            if self.follow:
                self._thread = threading.Thread(target=self._follow, name="runfacts-tool-control", daemon=True)
                self._thread.start()
            else:
                self._consumer.close()
            self._opened = True
            if self._board:
                log.info("paused capabilities (no new dispatch until resumed): %s", ", ".join(sorted(self._board)))
        return self

    def paused(self, capability_id: str) -> Pause | None:
        self.open()
        with self._lock:
            return self._board.get(capability_id)

    def board(self) -> dict[str, Pause]:
        """Every paused capability now."""
        self.open()
        with self._lock:
            return dict(self._board)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._consumer.close()

    def _catch_up(self, ends: dict[int, int], timeout_s: float) -> None:
        """Read until every partition's position reaches the end it had when we opened."""
        import time

        deadline = time.monotonic() + timeout_s
        positions = {p: 0 for p in ends}
        idle = 0  # polls that found nothing: past the last record (a commit marker ends the partition)
        while any(positions[p] < ends[p] for p in ends) and idle < 15:
            if time.monotonic() > deadline:
                from runfacts.schemas.errors import InfrastructureError
                raise InfrastructureError(f"{self.topic}: not read to its end within {timeout_s} s", retryable=True)
            found = consume_ready(self._consumer, 500, 0.2)
            idle = 0 if found else idle + 1
            for msg in found:
                if msg.error() is None:
                    positions[msg.partition()] = msg.offset() + 1
                self._apply(msg)
            for tp in self._consumer.position([TopicPartition(self.topic, p) for p in ends]):
                if tp.offset >= 0:
                    positions[tp.partition] = max(positions[tp.partition], tp.offset)

    def _follow(self) -> None:
        while not self._stop.is_set():
            try:
                for msg in consume_ready(self._consumer, 500, self.poll_s):
                    self._apply(msg)
            except Exception:  # noqa: BLE001 - keep following; the board keeps its last state
                log.exception("reading %s", self.topic)
                self._stop.wait(1.0)

    def _apply(self, msg: object) -> None:
        error = msg.error()  # type: ignore[attr-defined]
        value = msg.value()  # type: ignore[attr-defined]
        if error is not None or value is None:
            if value is None and error is None and msg.key():  # type: ignore[attr-defined]
                with self._lock:  # a tombstone (an operator's clean-up): nothing paused under the key
                    self._board.pop(msg.key().decode(), None)  # type: ignore[attr-defined]
            return
        try:
            event = self._codec.decode(value)
            if not isinstance(event, EventBase):
                raise TypeError(f"{type(event).__name__} is not an event")
        except Exception as exc:  # noqa: BLE001 - a record this code cannot read holds nothing back
            log.warning("%s: skipped an unreadable record at offset %s: %s", self.topic,
                        msg.offset(), exc)  # type: ignore[attr-defined]
            return
        with self._lock:
            self._board = fold(self._board, [event])


def since(pause: Pause, now: datetime) -> str:
    """How long a pause has lasted, in plain words (the CLI's list)."""
    seconds = max(0, int((now - pause.paused_at).total_seconds()))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s"

"""The relay's decisions, pure: error classes, what to do after a publish attempt, backoff, rate.

No Kafka, no database, no clock: the shell (`relay.py`) passes in error names, rows and times.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

# librdkafka error names (KafkaError.name()) that retrying cannot fix: the run is parked.
PERMANENT_ERRORS = frozenset({
    "MSG_SIZE_TOO_LARGE", "_MSG_SIZE_TOO_LARGE", "RECORD_LIST_TOO_LARGE", "INVALID_RECORD",
    "UNKNOWN_TOPIC_OR_PART", "_UNKNOWN_TOPIC", "TOPIC_EXCEPTION", "TOPIC_AUTHORIZATION_FAILED",
    "_INVALID_ARG", "POLICY_VIOLATION", "INVALID_TOPIC_EXCEPTION",
})


class Row(Protocol):
    """What the decisions need to know about an outbox row."""

    @property
    def seq(self) -> int: ...

    @property
    def run_id(self) -> str: ...

    @property
    def topic(self) -> str: ...


@dataclass(frozen=True)
class Failure:
    """Why one record (or, with seq None, the whole transaction) was not published."""

    seq: int | None
    error: str

    @property
    def permanent(self) -> bool:
        return self.seq is not None and self.error.split(":", 1)[0] in PERMANENT_ERRORS


@dataclass(frozen=True)
class Settlement:
    """After one publish attempt: rows to mark published, runs to park, whether to back off."""

    mark: tuple[int, ...]
    park: tuple[tuple[Row, str], ...]
    back_off: bool


def settle(rows: Sequence[Row], failures: Iterable[Failure]) -> Settlement:
    """Decide from a transactional publish: all committed, or nothing and park/back off.

    A Kafka transaction commits all rows or none, so any failure marks nothing. Each run with
    a permanent failure is parked from its first failing row; any transient failure backs off.
    """
    failures = list(failures)
    if not failures:
        return Settlement(tuple(row.seq for row in rows), (), False)
    by_seq = {f.seq: f for f in failures if f.permanent}
    first_per_run: dict[str, tuple[Row, str]] = {}
    for row in rows:
        if row.seq in by_seq and row.run_id not in first_per_run:
            first_per_run[row.run_id] = (row, by_seq[row.seq].error)
    transient = any(not f.permanent for f in failures)
    return Settlement((), tuple(first_per_run.values()), transient)


def without_parked(rows: Sequence[Row], parked: Mapping[str, int]) -> list[Row]:
    """Rows that may still be published: a run parked at seq S keeps only rows before S."""
    return [row for row in rows if row.seq < parked.get(row.run_id, row.seq + 1)]


def first_rows_to(rows: Sequence[Row], missing: set[str]) -> dict[str, Row]:
    """Per run, the first row whose topic is missing (that run gets parked there)."""
    first: dict[str, Row] = {}
    for row in rows:
        if row.topic in missing and row.run_id not in first:
            first[row.run_id] = row
    return first


def backoff_s(attempt: int, base_s: float, cap_s: float, jitter: float = 1.0) -> float:
    """Exponential backoff for the attempt-th consecutive failure (1-based), times jitter."""
    return min(cap_s, base_s * 2 ** max(0, attempt - 1)) * jitter


class RateWindow:
    """Events per second over the last `window_s` seconds; times come from the caller."""

    def __init__(self, window_s: float = 10.0) -> None:
        self.window_s = window_s
        self._points: deque[tuple[float, int]] = deque()
        self.total = 0

    def add(self, now: float, count: int) -> None:
        self.total += count
        self._points.append((now, count))
        self._trim(now)

    def rate(self, now: float) -> float:
        self._trim(now)
        return sum(count for _, count in self._points) / self.window_s

    def _trim(self, now: float) -> None:
        while self._points and self._points[0][0] < now - self.window_s:
            self._points.popleft()

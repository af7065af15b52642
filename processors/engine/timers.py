"""Timers: a time index persisted in the partition's `__timers` store (changelogged like any store).

Keys (big-endian due time, so a range scan yields timers in due order):
  b"d" + due_ms(8) + len(key)(2) + key + timer_id  -> payload      (the time index)
  b"r" + len(key)(2) + key + timer_id              -> due_ms(8)    (the reference, for cancel)
  b"v"                                             -> the layout's version (decimal ASCII)
The version key is checked before the index is read (`versions.check_layout`): a layout newer
than `TIMER_FORMAT` is refused, never misread. Version 1 (today's layout, the only one released)
writes no key: an index without one is version 1; the next layout writes its version there.
A (key, timer_id) pair has at most one timer: scheduling it again moves it. Writes go
through the partition's write buffer, so a fired or scheduled timer commits or rolls back
with the transaction that fired or scheduled it.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator

from runfacts.processors.engine.api import TIMER_STORE
from runfacts.processors.engine.store import PartitionState
from runfacts.processors.engine.versions import check_layout

_INDEX = b"d"
_END = b"e"
_REF = b"r"
_VERSION = b"v"
_UNKNOWN = -1
TIMER_FORMAT = 1
"""The version of the key layout above."""


def _ident(key: bytes, timer_id: str) -> bytes:
    if len(key) > 0xFFFF:
        raise ValueError(f"timer key too long ({len(key)} bytes, max 65535)")
    return len(key).to_bytes(2, "big") + key + timer_id.encode()


def _index_key(due_ms: int, ident: bytes) -> bytes:
    return _INDEX + due_ms.to_bytes(8, "big") + ident


def _parse_index(raw: bytes) -> tuple[int, bytes, str]:
    due = int.from_bytes(raw[1:9], "big")
    klen = int.from_bytes(raw[9:11], "big")
    return due, raw[11:11 + klen], raw[11 + klen:].decode()


class Timers:
    """The timer index of one partition."""

    def __init__(self, state: PartitionState) -> None:
        self._state = state
        self._store = state.stores[TIMER_STORE]
        self._buffer = state.buffers[TIMER_STORE]
        self._next_due: int | None = _UNKNOWN
        self._checked = False  # the layout's version key was read (and is one this code knows)

    def _check(self) -> None:
        if not self._checked:
            check_layout("timer index", self._store.get(_VERSION), TIMER_FORMAT)
            self._checked = True

    def schedule(self, key: bytes, due_ms: int, timer_id: str, payload: bytes = b"") -> None:
        """Set (or move) the timer (key, timer_id) to fire at due_ms with payload."""
        if type(key) is not bytes or type(payload) is not bytes:
            raise TypeError(f"timer {timer_id!r}: key and payload must be bytes")
        if not 0 <= due_ms < 1 << 63:
            raise ValueError(f"timer {timer_id!r}: due_ms {due_ms} out of range")
        self.cancel(key, timer_id)
        ident = _ident(key, timer_id)
        self._store.put(_index_key(due_ms, ident), payload)
        self._store.put(_REF + ident, due_ms.to_bytes(8, "big"))
        if self._next_due != _UNKNOWN:
            self._next_due = due_ms if self._next_due is None else min(self._next_due, due_ms)

    def cancel(self, key: bytes, timer_id: str) -> bool:
        """Remove the timer (key, timer_id); False when there was none."""
        self._check()
        ident = _ident(key, timer_id)
        due = self._store.get(_REF + ident)
        if due is None:
            return False
        self._store.delete(_INDEX + due + ident)
        self._store.delete(_REF + ident)
        return True

    def next_due(self) -> int | None:
        """The earliest due time (None: no timers); cached between schedule/fire calls."""
        if self._next_due == _UNKNOWN:
            self._check()
            first = next(self._entries(_END), None)
            self._next_due = None if first is None else _parse_index(first[0])[0]
        return self._next_due

    def forget(self) -> None:
        """Forget the cached earliest due time (after a rollback or restore)."""
        self._next_due = _UNKNOWN
        self._checked = False

    def pop_due(self, now_ms: int, limit: int) -> list[tuple[bytes, str, int, bytes]]:
        """Remove and return up to `limit` timers due at or before now_ms, in due order."""
        if (nxt := self.next_due()) is None or nxt > now_ms:
            return []
        fired = []
        for raw, payload in self._entries(_INDEX + (now_ms + 1).to_bytes(8, "big")):
            due, key, timer_id = _parse_index(raw)
            self._store.delete(raw)
            self._store.delete(_REF + _ident(key, timer_id))
            fired.append((key, timer_id, due, payload))
            if len(fired) >= limit:
                break
        self._next_due = _UNKNOWN
        return fired

    def _entries(self, end: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Index entries below `end` in order, merging committed data with buffered writes."""
        pending = sorted((k, v) for k, v in self._buffer.items() if _INDEX <= k < end)
        touched = {k for k, _ in pending}
        committed = ((k, v) for k, v in self._state.backend.scan(TIMER_STORE, _INDEX, end)
                     if k not in touched)
        live = ((k, v) for k, v in pending if v is not None)
        yield from heapq.merge(committed, live)  # type: ignore[misc]

"""What keeps the gateway bounded, pure (the clock comes in as a number): a token bucket per
API key, and the idempotency record of each key's recent POSTs.

- `TokenBucket`: `rate` requests a second on average, bursts up to `burst`; `take(now)` says
  whether a request may pass and, if not, how long until it may (the Retry-After).
- `Idempotency`: (key name, Idempotency-Key) -> the request's fingerprint and its answer, for
  `ttl_s`, at most `capacity` entries (oldest dropped first). The same key with the same body
  gets the same answer; with another body, a conflict; while the first is still being answered,
  `pending` (the caller answers 409 with a retry hint rather than running it twice).
- `Owners`: run id -> its tenant and user (set when the run starts) for `ttl_s`, at most
  `capacity` runs: a stream's read check without reading the run's state again (10,000 streams
  opened at once on few runs read each run's state once, not 10,000 times).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass
class TokenBucket:
    """One key's allowance."""

    rate: float
    burst: float
    tokens: float = -1.0
    at: float = 0.0

    def take(self, now: float) -> float:
        """0.0 when the request may pass (a token taken), else the seconds until one is there."""
        if self.tokens < 0:
            self.tokens, self.at = self.burst, now
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0.0
        return (1.0 - self.tokens) / self.rate if self.rate > 0 else 60.0


@dataclass
class RateLimits:
    """A bucket per key name (keys are configured, so their number is bounded)."""

    rate: float
    burst: float
    buckets: dict[str, TokenBucket] = field(default_factory=dict)

    def take(self, key: str, now: float) -> float:
        bucket = self.buckets.get(key)
        if bucket is None:
            bucket = self.buckets[key] = TokenBucket(self.rate, self.burst)
        return bucket.take(now)


@dataclass(frozen=True)
class Stored:
    """An answered request: its fingerprint and the answer (status, JSON body)."""

    fingerprint: str
    status: int
    body: Any
    at: float
    headers: tuple[tuple[str, str], ...] = ()
    problem: bool = False


Lookup = tuple[Literal["new", "replay", "conflict", "pending"], Stored | None]


@dataclass
class Idempotency:
    """Recent answers by (key name, Idempotency-Key)."""

    ttl_s: float = 24 * 3600.0
    capacity: int = 10_000
    entries: OrderedDict[tuple[str, str], Stored | str] = field(default_factory=OrderedDict)

    def begin(self, who: str, key: str, fingerprint: str, now: float) -> Lookup:
        """What to do with a request: `new` (it is now pending), `replay` the stored answer,
        `conflict` (the key was used for another request) or `pending` (still being answered)."""
        self._expire(now)
        found = self.entries.get((who, key))
        if found is None:
            self.entries[(who, key)] = fingerprint
            while len(self.entries) > self.capacity:
                self.entries.popitem(last=False)
            return "new", None
        seen = found if isinstance(found, str) else found.fingerprint
        if seen != fingerprint:
            return "conflict", None if isinstance(found, str) else found
        return ("pending", None) if isinstance(found, str) else ("replay", found)

    def finish(self, who: str, key: str, stored: Stored | None) -> None:
        """Record the answer (None: the request failed before it reached the decider; forget it
        so a retry with the same key runs again)."""
        if stored is None:
            self.entries.pop((who, key), None)
        else:
            self.entries[(who, key)] = stored

    def _expire(self, now: float) -> None:
        while self.entries:
            first = next(iter(self.entries.values()))
            if isinstance(first, str) or now - first.at < self.ttl_s:
                return
            self.entries.popitem(last=False)


@dataclass(frozen=True)
class Owner:
    """Who a run belongs to: what the read check (`Service.may_read`) looks at."""

    tenant: str | None
    userId: str | None  # noqa: N815 - the run state's field name


@dataclass
class Owners:
    """Recently read runs' owners (positive answers only: a run not found is read again)."""

    ttl_s: float = 30.0
    capacity: int = 20_000
    entries: OrderedDict[str, tuple[float, Owner]] = field(default_factory=OrderedDict)

    def remember(self, run_id: str, owner: Owner, now: float) -> None:
        self.entries.pop(run_id, None)
        self.entries[run_id] = (now, owner)
        while len(self.entries) > self.capacity:
            self.entries.popitem(last=False)

    def get(self, run_id: str, now: float) -> Owner | None:
        found = self.entries.get(run_id)
        if found is None:
            return None
        if now - found[0] >= self.ttl_s:
            del self.entries[run_id]
            return None
        return found[1]


__all__ = ["Idempotency", "Owner", "Owners", "RateLimits", "Stored", "TokenBucket"]

"""Who may stay signed in: server-side sessions, the live users file, login throttling.

- `Sessions`: the sessions this dashboard issued, by session id (the cookie's `sid`). A
  cookie is honoured only while its id is live here (an allowlist: a restart ends every
  session), so sign-out ends a session for good, "sign out everywhere" ends all of a user's,
  and a session whose user left the users file or whose roles or tenant changed there ends at
  its next request (its SSE stream within a second).
- `UsersFile`: the users file, read again when it changes on disk (stat per call), so a
  role or tenant change takes effect at once; a file that no longer parses keeps the last
  good directory (and says so in the log) rather than signing everyone out.
- `LoginThrottle`: failed sign-ins per user name and per client address in a sliding
  window; past the limit a sign-in is refused before the password is checked, with the
  seconds until the oldest failure leaves the window (HTTP 429, Retry-After).
The clock comes in as `now_s`.
"""

from __future__ import annotations

import logging
import math
import threading
from collections import OrderedDict, deque
from dataclasses import dataclass
from pathlib import Path

from runfacts.dashboard.session import Session
from runfacts.schemas.errors import ConfigError
from runfacts.security.identity import UserDirectory, load_users

log = logging.getLogger("runfacts.dashboard")


class UsersFile:
    """The users file at `path`, reloaded when its size, mtime or inode change."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp = self._stat()
        self._directory = load_users(path)
        self._lock = threading.Lock()

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def current(self) -> UserDirectory:
        """The directory as the file says now (the last good one if it does not parse)."""
        stamp = self._stat()
        if stamp == self._stamp:
            return self._directory
        with self._lock:
            if stamp != self._stamp:
                try:
                    self._directory = load_users(self.path) if stamp is not None else UserDirectory({})
                except ConfigError as exc:
                    log.error("users file %s changed but does not parse (%s): keeping the last good one",
                              self.path, exc)
                self._stamp = stamp
        return self._directory


def directory_of(users: UserDirectory | UsersFile) -> UserDirectory:
    """The current directory of a fixed directory or a live users file."""
    return users.current() if isinstance(users, UsersFile) else users


@dataclass(frozen=True)
class _Live:
    subject: str
    expires_at_s: int


class Sessions:
    """Live sessions by id; everything else is revoked."""

    def __init__(self) -> None:
        self._live: dict[str, _Live] = {}
        self._lock = threading.Lock()

    def add(self, session: Session) -> None:
        with self._lock:
            self._live[session.sid] = _Live(session.identity.subject, session.expires_at_s)

    def alive(self, session: Session, users: UserDirectory, now_s: int) -> bool:
        """True while the session is live, unexpired, and its user is in the users file with
        the same roles and tenant; a session found otherwise is revoked on the spot."""
        with self._lock:
            live = self._live.get(session.sid)
        if live is None:
            return False
        record = users.users.get(session.identity.subject)
        if (live.expires_at_s <= now_s or record is None or record.roles != session.identity.roles
                or record.tenant != session.identity.tenant):
            self.revoke(session.sid)
            return False
        return True

    def revoke(self, sid: str) -> bool:
        """End one session; False when it was not live."""
        with self._lock:
            return self._live.pop(sid, None) is not None

    def revoke_user(self, subject: str) -> int:
        """End every session of `subject` (sign out everywhere); how many ended."""
        with self._lock:
            ended = [sid for sid, live in self._live.items() if live.subject == subject]
            for sid in ended:
                del self._live[sid]
        return len(ended)

    def prune(self, now_s: int) -> None:
        with self._lock:
            for sid in [sid for sid, live in self._live.items() if live.expires_at_s <= now_s]:
                del self._live[sid]


@dataclass(frozen=True)
class ThrottleSettings:
    """At most `max_per_user` failed sign-ins per user name and `max_per_address` per client
    address within `window_s` seconds."""

    max_per_user: int = 5
    max_per_address: int = 20
    window_s: int = 900
    max_keys: int = 100_000  # memory bound: the oldest keys are forgotten first


class LoginThrottle:
    """Failed sign-ins in a sliding window, per user and per client address."""

    def __init__(self, settings: ThrottleSettings | None = None) -> None:
        self.settings = settings or ThrottleSettings()
        self._failures: OrderedDict[str, deque[int]] = OrderedDict()
        self._lock = threading.Lock()

    def _recent(self, key: str, now_s: int) -> deque[int]:
        times = self._failures.get(key)
        if times is None:
            return deque()
        while times and times[0] <= now_s - self.settings.window_s:
            times.popleft()
        if not times:
            del self._failures[key]
        return times

    def retry_after(self, user: str, address: str, now_s: int) -> int | None:
        """Seconds until a sign-in of `user` from `address` may be tried again (None: now)."""
        with self._lock:
            return self._wait(user, address, now_s)

    def _wait(self, user: str, address: str, now_s: int) -> int | None:
        s = self.settings
        waits = []
        for key, limit in ((f"user:{user}", s.max_per_user), (f"addr:{address}", s.max_per_address)):
            times = self._recent(key, now_s)
            if len(times) >= limit:
                waits.append(times[len(times) - limit] + s.window_s - now_s)
        return max(1, math.ceil(max(waits))) if waits else None

    def attempt(self, user: str, address: str, now_s: int) -> int | None:
        """Start a sign-in: the seconds to wait when throttled, else None and the attempt counts
        as a failure until `succeeded` (so parallel attempts cannot all pass the check)."""
        with self._lock:
            wait = self._wait(user, address, now_s)
            if wait is None:
                self._add(user, address, now_s)
            return wait

    def failed(self, user: str, address: str, now_s: int) -> None:
        """Count one failed sign-in (`attempt` already counts the ones it lets through)."""
        with self._lock:
            self._add(user, address, now_s)

    def _add(self, user: str, address: str, now_s: int) -> None:
        for key in (f"user:{user}", f"addr:{address}"):
            self._recent(key, now_s)
            self._failures.setdefault(key, deque()).append(now_s)
            self._failures.move_to_end(key)
        while len(self._failures) > self.settings.max_keys:
            self._failures.popitem(last=False)

    def succeeded(self, user: str, address: str, started_s: int) -> None:
        """A right password: the user's failures are cleared, the address keeps its others
        (the attempt started at `started_s` is taken back)."""
        with self._lock:
            self._failures.pop(f"user:{user}", None)
            times = self._failures.get(f"addr:{address}")
            if times is not None and started_s in times:
                times.remove(started_s)


def loopback(host: str) -> bool:
    """True for an interface only this machine reaches (127.0.0.0/8, ::1, localhost)."""
    return host in ("localhost", "::1", "[::1]") or host.startswith("127.")


def cookie_secure_for(setting: bool | None, host: str) -> bool:
    """`cookie_secure` as configured, else on unless the dashboard is bound to loopback."""
    return setting if setting is not None else not loopback(host)

"""Dashboard sessions: a signed cookie (HMAC-SHA256) carrying who is logged in and their CSRF token.

Cookie value: `base64url(json claims) "." base64url(hmac(secret, that))`, claims
`{sub, roles, tenant, csrf, exp, sid}`; `sid` names the session server-side
(`guard.Sessions`: a cookie counts only while its session is live there). The cookie is
HttpOnly and SameSite=Strict; every POST must carry
the session's CSRF token (form field `csrf` or header `X-CSRF-Token`), compared in constant
time. Pure: the clock comes in as `now_s`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass

from runfacts.security.identity import Identity

SESSION_COOKIE = "rf_session"
LOGIN_CSRF_COOKIE = "rf_login_csrf"
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"


@dataclass(frozen=True)
class Session:
    """A logged-in user: identity, CSRF token, expiry (seconds since epoch), session id."""

    identity: Identity
    csrf: str
    expires_at_s: int
    sid: str = ""


class SessionSigner:
    """Issues and checks session cookies with one secret."""

    def __init__(self, secret: bytes, ttl_s: int = 8 * 3600) -> None:
        if len(secret) < 32:
            raise ValueError("session secret must be at least 32 bytes")
        self._secret = secret
        self.ttl_s = ttl_s

    def issue(self, identity: Identity, now_s: int) -> tuple[Session, str]:
        """A new session (fresh CSRF token) and its cookie value."""
        session = Session(identity, new_token(), now_s + self.ttl_s, new_token())
        claims = {"sub": identity.subject, "roles": list(identity.roles), "tenant": identity.tenant,
                  "csrf": session.csrf, "exp": session.expires_at_s, "sid": session.sid}
        body = _b64(json.dumps(claims, separators=(",", ":"), sort_keys=True).encode())
        return session, f"{body}.{_b64(self._mac(body))}"

    def read(self, cookie: str | None, now_s: int) -> Session | None:
        """The session in `cookie`, or None when missing, forged, malformed or expired."""
        if not cookie or cookie.count(".") != 1:
            return None
        body, sig = cookie.split(".")
        try:
            if not hmac.compare_digest(_unb64(sig), self._mac(body)):
                return None
            claims = json.loads(_unb64(body))
            identity = Identity(str(claims["sub"]), tuple(claims["roles"]), claims.get("tenant"))
            session = Session(identity, str(claims["csrf"]), int(claims["exp"]), str(claims.get("sid", "")))
        except (ValueError, KeyError, TypeError):
            return None
        return session if session.expires_at_s > now_s else None

    def _mac(self, body: str) -> bytes:
        return hmac.new(self._secret, b"runfacts.session." + body.encode(), hashlib.sha256).digest()


def new_token() -> str:
    """A random CSRF token."""
    return secrets.token_urlsafe(24)


def csrf_ok(expected: str | None, given: str | None) -> bool:
    """Constant-time comparison; missing tokens never match."""
    if not expected or not given:
        return False
    return hmac.compare_digest(expected.encode(), given.encode())


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))

"""Who a human is: the users file (hashed passwords and CLI tokens) shared by the dashboard and CLI.

The users file is TOML, one table per user (RUNFACTS_USERS_FILE, default
~/.config/runfacts/users.toml):

    [users.alice]
    roles = ["support_agent"]
    password = "scrypt$16384$8$1$<salt>$<hash>"     # `runfacts users hash`
    tokens = ["scrypt$16384$8$1$<salt>$<hash>"]     # optional: CLI tokens, hashed the same way
    tenant = "acme"                                 # optional

Secrets are only ever stored hashed (stdlib scrypt, random salt) and compared in constant
time. The CLI authenticates with RUNFACTS_USER + RUNFACTS_TOKEN, or a credentials file
(~/.config/runfacts/credentials.toml: `user = ...`, `token = ...`, mode 600); the token is
checked against the user's tokens or password. An authenticated `Identity` becomes the
`actor` of the commands that user sends, with the authenticating source (cli, dashboard).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import stat
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from runfacts.schemas.common import Actor
from runfacts.schemas.errors import ConfigError, RunfactsError

ENV_USERS_FILE = "RUNFACTS_USERS_FILE"
ENV_USER = "RUNFACTS_USER"
ENV_TOKEN = "RUNFACTS_TOKEN"
ENV_CREDENTIALS = "RUNFACTS_CREDENTIALS_FILE"
CONFIG_DIR = Path("~/.config/runfacts")
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1
_DUMMY_HASH = "scrypt$16384$8$1$AAAAAAAAAAAAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"


class AuthenticationFailed(RunfactsError):
    """Unknown user or wrong secret (the message never says which)."""


@dataclass(frozen=True)
class UserRecord:
    """One user of the users file."""

    name: str
    roles: tuple[str, ...]
    password: str | None = None
    tokens: tuple[str, ...] = ()
    tenant: str | None = None


@dataclass(frozen=True)
class Identity:
    """An authenticated human: name, roles, tenant."""

    subject: str
    roles: tuple[str, ...]
    tenant: str | None = None

    def actor(self, auth_source: str) -> Actor:
        """The actor to put on this person's commands, authenticated by `auth_source`."""
        return Actor(subjectId=self.subject, roles=self.roles, tenant=self.tenant, authSource=auth_source)


def hash_secret(secret: str, salt: bytes | None = None) -> str:
    """`scrypt$N$r$p$salt$hash` (base64url) of a password or token."""
    salt = salt if salt is not None else secrets.token_bytes(16)
    digest = hashlib.scrypt(secret.encode(), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P, dklen=32)
    return f"scrypt${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${_b64(salt)}${_b64(digest)}"


def verify_secret(secret: str, hashed: str) -> bool:
    """True when `secret` hashes to `hashed` (constant-time compare; malformed hashes never match)."""
    try:
        scheme, n, r, p, salt, digest = hashed.split("$")
        if scheme != "scrypt":
            return False
        want = _unb64(digest)
        got = hashlib.scrypt(secret.encode(), salt=_unb64(salt), n=int(n), r=int(r), p=int(p),
                             dklen=len(want), maxmem=2**27)
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(got, want)


class UserDirectory:
    """The users of one users file."""

    def __init__(self, users: Mapping[str, UserRecord]) -> None:
        self.users = dict(users)

    def authenticate(self, name: str, secret: str, *, tokens: bool = False) -> Identity:
        """The identity of `name` if `secret` is its password (or, with tokens, one of its tokens)."""
        user = self.users.get(name)
        hashes = () if user is None else ((user.password,) if user.password else ()) + (user.tokens if tokens else ())
        matched = False
        for hashed in hashes or (_DUMMY_HASH,):  # same work for unknown users
            matched = verify_secret(secret, hashed) or matched
        if user is None or not matched:
            raise AuthenticationFailed("authentication failed: unknown user or wrong secret "
                                       f"(check {ENV_USER}/{ENV_TOKEN} or the users file)")
        return Identity(user.name, user.roles, user.tenant)


def parse_users(text: str, source: str = "users file") -> UserDirectory:
    """Parse the users TOML; a ConfigError names the user and field that is wrong."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(source, "<toml>", str(exc)) from None
    users: dict[str, UserRecord] = {}
    for name, entry in (data.get("users") or {}).items():
        roles = entry.get("roles")
        if not isinstance(roles, list) or not all(isinstance(r, str) and r for r in roles):
            raise ConfigError(f"{source} users.{name}.roles", roles, "must be a list of role names")
        tokens = entry.get("tokens", [])
        if not isinstance(tokens, list):
            raise ConfigError(f"{source} users.{name}.tokens", tokens, "must be a list of hashes")
        users[name] = UserRecord(name, tuple(roles), entry.get("password"), tuple(tokens), entry.get("tenant"))
    return UserDirectory(users)


def users_file(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    return Path(env.get(ENV_USERS_FILE) or CONFIG_DIR / "users.toml").expanduser()


def load_users(path: Path | None = None, environ: Mapping[str, str] | None = None) -> UserDirectory:
    """The users file at `path` or $RUNFACTS_USERS_FILE (default ~/.config/runfacts/users.toml)."""
    path = path or users_file(environ)
    if not path.is_file():
        raise ConfigError(ENV_USERS_FILE, str(path), "users file not found (create it; see `runfacts users hash`)")
    return parse_users(path.read_text(encoding="utf-8"), str(path))


def cli_identity(directory: UserDirectory, environ: Mapping[str, str] | None = None) -> Identity:
    """The CLI user: RUNFACTS_USER/RUNFACTS_TOKEN, else the credentials file, verified."""
    env = os.environ if environ is None else environ
    user, token = env.get(ENV_USER), env.get(ENV_TOKEN)
    if not (user and token):
        user, token = _credentials_file(env)
    return directory.authenticate(user, token, tokens=True)


def _credentials_file(env: Mapping[str, str]) -> tuple[str, str]:
    path = Path(env.get(ENV_CREDENTIALS) or CONFIG_DIR / "credentials.toml").expanduser()
    if not path.is_file():
        raise ConfigError(ENV_USER, None, f"not logged in: set {ENV_USER} and {ENV_TOKEN}, or write {path}")
    if path.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(ENV_CREDENTIALS, str(path), "readable by others: chmod 600")
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data.get("user"), str) or not isinstance(data.get("token"), str):
        raise ConfigError(ENV_CREDENTIALS, str(path), "needs `user = ...` and `token = ...`")
    return data["user"], data["token"]


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))

"""Signed approvals from the services that authenticate people (dashboard, CLI).

Uses the security module's HMAC approval tokens (`runfacts.processors.policy.approvals`,
keys from RUNFACTS_APPROVAL_KEYS_FILE / RUNFACTS_APPROVAL_KEYS) when that module is installed
and keys are configured; otherwise the command carries no token and the decider's policy
decides whether that is acceptable.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from runfacts.privacy.envelope import is_protected, pseudonym
from runfacts.privacy.keys import load_privacy_keys_if_configured
from runfacts.schemas.errors import ConfigError

DEFAULT_TOKEN_TTL_MS = 5 * 60 * 1000


@dataclass(frozen=True)
class ApprovalRequest:
    """What a token binds: run, approval, argument hash, decision, approver, and the digest of
    the argument display the approver was shown (None: the approval has no display)."""

    run_id: str
    approval_id: str
    args_hash: str
    decision: str
    subject_id: str
    display_digest: str | None = None


def sign_approval(request: ApprovalRequest, now_ms: int, ttl_ms: int = DEFAULT_TOKEN_TTL_MS,
                  environ: Mapping[str, str] | None = None) -> str | None:
    """A signed approval token, or None when no signing keys are configured."""
    try:
        from runfacts.processors.policy import approvals as approval_tokens
        from runfacts.processors.policy import keyring as approval_keys  # type: ignore[attr-defined]
    except ImportError:
        return None
    env = os.environ if environ is None else environ
    if not (env.get(approval_keys.ENV_KEYS) or env.get(approval_keys.ENV_KEYS_FILE)):
        return None
    keyring = approval_keys.load_keyring(environ=env)
    if keyring.current is None:
        raise ConfigError(approval_keys.ENV_KEYS, "<keyring>", "no current key to sign approvals with")
    claims = approval_tokens.ApprovalClaims(
        run_id=request.run_id, approval_id=request.approval_id, args_hash=request.args_hash,
        decision=request.decision, subject_id=_pseudonymous(request.subject_id, env), expires_at_ms=now_ms + ttl_ms,
        display_digest=request.display_digest)
    return approval_tokens.issue_token(keyring, keyring.current, claims)


def _pseudonymous(subject_id: str, env: Mapping[str, str]) -> str:
    """The approver as the command's actor will carry it: its pseudonym when personal fields are
    sealed (RUNFACTS_PII_KEYS[_FILE], runfacts.privacy), so the token binds what the decider sees."""
    keys = load_privacy_keys_if_configured(env)
    return subject_id if keys is None or is_protected(subject_id) else pseudonym(subject_id, keys)

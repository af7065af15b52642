"""RFC 9457 problem documents, pure: every error the gateway answers names what was wrong, the
field (or header) at fault and the fix; a decider's typed rejection keeps its reason code.

    {"type": "urn:runfacts:problem:command-rejected", "title": "The run decider refused the command",
     "status": 409, "detail": "run r-1: ResumeRun rejected: self_approval_forbidden",
     "reason": "self_approval_forbidden", "fix": "..."}
"""

from __future__ import annotations

from typing import Any

from runfacts.client.errors import (
    BadArgument,
    ClientError,
    CommandRejected,
    RunNeedsReview,
    RunNotFound,
    WaitTimeout,
)
from runfacts.schemas.errors import ConfigError, InfrastructureError, RunfactsError

MEDIA_TYPE = "application/problem+json"
DENIALS = frozenset({"missing_actor", "untrusted_source", "forbidden_role", "no_policy_rule", "tenant_mismatch",
                     "self_approval_forbidden", "source_signature_missing", "source_signature_invalid",
                     "source_key_unknown", "source_key_retired", "token_missing", "token_malformed",
                     "token_retired_key", "token_unknown_key", "token_bad_signature"})
"""Reason codes that mean "not allowed" (403) rather than "not now" (409)."""
INVALID = frozenset({"invalid_arguments"})
"""Reason codes that mean "the request's content is wrong" (422): the arguments broke the tool's schema."""


class ProblemError(RunfactsError):
    """Raised inside the gateway to answer a problem document."""

    def __init__(self, status: int, kind: str, title: str, detail: str, *, field: str | None = None,
                 fix: str | None = None, headers: dict[str, str] | None = None, **extra: Any) -> None:
        super().__init__(detail)
        self.status, self.headers = status, headers or {}
        self.document: dict[str, Any] = {"type": f"urn:runfacts:problem:{kind}", "title": title, "status": status,
                                         "detail": detail}
        if field is not None:
            self.document["field"] = field
        if fix is not None:
            self.document["fix"] = fix
        self.document.update({k: v for k, v in extra.items() if v is not None})


def invalid_body(errors: list[dict[str, Any]]) -> ProblemError:
    """422 from pydantic's errors: the first field named, every error listed (without inputs)."""
    shown = [{"field": ".".join(str(p) for p in e.get("loc", ()) if p != "[key]") or "(body)",
              "message": e.get("msg", ""), "type": e.get("type", "")} for e in errors[:20]]
    first = shown[0] if shown else {"field": "(body)", "message": "invalid"}
    fix = ("remove it: the approver is the authenticated key's subject, never a body field"
           if first["field"] in ("approver", "actor", "subjectId") and first.get("type") == "extra_forbidden"
           else "see the OpenAPI document at /openapi.json for the request's schema")
    return ProblemError(422, "invalid-body", "The request body does not validate",
                        f"{first['field']}: {first['message']}", field=first["field"], fix=fix, errors=shown)


def from_error(exc: Exception) -> ProblemError:
    """The problem an error of the client (or of its infrastructure) is for an HTTP caller."""
    if isinstance(exc, ProblemError):
        return exc
    if isinstance(exc, BadArgument):
        return ProblemError(422, "bad-argument", "An argument was refused", str(exc), field=exc.argument,
                            fix=str(exc).rsplit(": ", 1)[-1])
    if isinstance(exc, RunNotFound):
        return ProblemError(404, "run-not-found", "No such run", str(exc), field="runId",
                            fix="start it with POST /runs, or check the run id")
    if isinstance(exc, CommandRejected):
        status = 403 if exc.reason in DENIALS else 422 if exc.reason in INVALID else 409
        return ProblemError(status, "command-rejected", "The run decider refused the command", str(exc),
                            field="arguments" if exc.reason in INVALID else None, reason=exc.reason,
                            fix=_fix(exc.reason), commandType=exc.command_type)
    if isinstance(exc, RunNeedsReview):
        return ProblemError(409, "run-needs-review", "The run waits for a person", str(exc), reason=exc.reason,
                            fix="an operator reviews the run (runfacts ops) before it continues")
    if isinstance(exc, WaitTimeout):
        return ProblemError(503, "no-answer-yet", "The run decider did not answer in time", str(exc),
                            fix="retry with the same Idempotency-Key: the command is applied at most once",
                            headers={"Retry-After": "2"})
    if isinstance(exc, InfrastructureError):
        return ProblemError(503, "unavailable", "The broker is not reachable", str(exc),
                            fix="retry with the same Idempotency-Key", headers={"Retry-After": "5"})
    if isinstance(exc, ConfigError):
        return ProblemError(503, "gateway-misconfigured", "The gateway is not configured for this", str(exc),
                            fix="the gateway's operator sets what the detail names")
    if isinstance(exc, ClientError):
        return ProblemError(409, "run-conflict", "The run cannot do this now", str(exc))
    raise exc


def _fix(reason: str) -> str:
    fixes = {
        "forbidden_role": "use an API key whose roles the policy allows for this command",
        "tenant_mismatch": "act on runs of your key's tenant only",
        "self_approval_forbidden": "someone other than the run's requester decides the approval",
        "stale_version": "read the run again and retry",
        "untrusted_source": "the key's source must be a trusted source of the access policy",
        "invalid_arguments": "send arguments that fit the tool's schema (the detail names the field and its bound)",
    }
    return fixes.get(reason, "see docs/decider.md for the reason code")


__all__ = ["DENIALS", "MEDIA_TYPE", "ProblemError", "from_error", "invalid_body"]

"""What a tool raises to say how it ended, and what the registry raises for a bad registry."""

from __future__ import annotations

from datetime import datetime
from email.utils import parsedate_to_datetime

from runfacts.processors.policy.retry import ErrorClass
from runfacts.schemas.errors import RunfactsError

_RETRYABLE_DEFAULT = {ErrorClass.TRANSIENT: True, ErrorClass.RATE_LIMITED: True}


class ToolError(RunfactsError):
    """A tool's typed failure: the tool's declaration that the effect did NOT happen.

    Retryability is a property of the error, not of the caller.
    `raise ToolError("rate_limited", retryable=True, retry_after_ms=500)`: retried with the
    same idempotency key per the capability's retry policy. `raise ToolError("insufficient_funds")`:
    failed at once. The reported `errorClass` is the code when it is one of the runtime's
    classes (transient, rate_limited, validation, permission, conflict, refused, provider),
    else `transient` (retryable) or `refused` (not retryable), with the code in the message.

    `happened=False` (the default) is the promise a failure needs: nothing of the effect
    happened (e.g. the backend refused, or the connection was refused before anything was
    sent). A tool that cannot promise it passes `happened=True` (or raises `OutcomeUnknown`):
    the call goes to result_unknown and is reconciled, never failed or re-run. Every other
    exception a side-effecting tool raises is treated as `happened=True` (docs/tools.md)."""

    def __init__(self, code: str, detail: str = "", *, retryable: bool | None = None,
                 retry_after_ms: int | None = None, happened: bool = False) -> None:
        if happened and retryable:
            raise ValueError(f"ToolError({code!r}, retryable=True, happened=True): an effect that may have "
                             "happened is reconciled, never retried: drop one of them")
        self.code = code
        self.detail = detail
        self.error_class = _error_class(code, retryable)
        self.retryable = self.error_class in _RETRYABLE_DEFAULT
        self.retry_after_ms = retry_after_ms
        self.happened = happened
        super().__init__(f"{code}: {detail}" if detail else code)


def _error_class(code: str, retryable: bool | None) -> ErrorClass:
    try:
        known = ErrorClass(code)
    except ValueError:
        return ErrorClass.TRANSIENT if retryable else ErrorClass.REFUSED
    if known in (ErrorClass.UNKNOWN_OUTCOME, ErrorClass.FENCED):
        raise ValueError(f"ToolError({code!r}): raise OutcomeUnknown when the tool may have acted")
    if retryable is not None and retryable != (known in _RETRYABLE_DEFAULT):
        raise ValueError(f"ToolError({code!r}, retryable={retryable}): {code} is "
                         f"{'' if known in _RETRYABLE_DEFAULT else 'not '}retryable by definition")
    return known


def retry_after_ms(value: str | None, now: datetime | None = None) -> int | None:
    """An HTTP `Retry-After` header in milliseconds, for `ToolError("rate_limited", retry_after_ms=...)`:
    delay-seconds (`"2"` -> 2000), or an HTTP-date measured from `now` (give it: no clock is read
    here; without it a date gives None). None when absent or unreadable: the dispatcher then backs
    off per the capability's retry policy."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    if text.isdigit():
        return int(text) * 1000
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if now is None or when.tzinfo is None:
        return None
    return max(0, int((when - now).total_seconds() * 1000))


class OutcomeUnknown(RunfactsError):
    """The tool may have acted but cannot say (e.g. its own backend timed out after sending):
    the call goes to result_unknown and is reconciled by the tool's lookup, never re-run
    (a read-only or idempotent tool is re-run instead: re-running it is safe)."""


class RegistryError(RunfactsError):
    """A registry that cannot be served: the message names the tool and what to fix."""

    def __init__(self, tool: str, why: str) -> None:
        self.tool = tool
        super().__init__(f"tool {tool}: {why}")

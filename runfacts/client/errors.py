"""What `runfacts.client` raises: one root (`ClientError`, a `RunfactsError`) and a typed error
for every way a run or a tool call can end without the value the agent waited for."""

from __future__ import annotations

from runfacts.schemas.errors import RunfactsError


class ClientError(RunfactsError):
    """Base of every error `runfacts.client` raises; carries the run (and call) it is about."""

    def __init__(self, run_id: str, message: str, tool_call_id: str | None = None) -> None:
        self.run_id = run_id
        self.tool_call_id = tool_call_id
        where = f"run {run_id}" + (f", tool call {tool_call_id}" if tool_call_id else "")
        super().__init__(f"{where}: {message}")


class CommandRejected(ClientError):
    """The run decider refused a command; `reason` is its reasonCode (e.g. `stale_version`)."""

    def __init__(self, run_id: str, command_type: str, reason: str, detail: str = "",
                 tool_call_id: str | None = None) -> None:
        self.command_type, self.reason, self.detail = command_type, reason, detail
        super().__init__(run_id, f"{command_type} rejected: {reason}" + (f" ({detail})" if detail else ""),
                         tool_call_id)


class ApprovalRejected(ClientError):
    """An approver refused the call; it will not run."""

    def __init__(self, run_id: str, tool_call_id: str, approver: str) -> None:
        self.approver = approver
        super().__init__(run_id, f"approval rejected by {approver}", tool_call_id)


class ApprovalExpired(ClientError):
    """Nobody decided the approval in time; the run waits for re-authorization."""

    def __init__(self, run_id: str, tool_call_id: str, expires_at_ms: int) -> None:
        self.expires_at_ms = expires_at_ms
        super().__init__(run_id, f"approval expired (at {expires_at_ms} ms); propose again to re-authorize",
                         tool_call_id)


class ApprovalInvalidated(ClientError):
    """The pending approval can no longer be used (arguments changed, superseded, run ended)."""

    def __init__(self, run_id: str, tool_call_id: str, reason: str, detail: str = "") -> None:
        self.reason = reason
        super().__init__(run_id, f"approval invalidated: {reason}" + (f" ({detail})" if detail else ""),
                         tool_call_id)


class ToolFailed(ClientError):
    """The tool reported a failure; `retryable` says whether an operator's retry may help."""

    def __init__(self, run_id: str, tool_call_id: str, error_class: str, retryable: bool, detail: str = "") -> None:
        self.error_class, self.retryable, self.detail = error_class, retryable, detail
        super().__init__(run_id, f"tool failed: {error_class} ({'retryable' if retryable else 'not retryable'})"
                         + (f": {detail}" if detail else ""), tool_call_id)


class RunNeedsReview(ClientError):
    """The run waits for a person (budget, loop, unresolved side effect, ...); no more tries."""

    def __init__(self, run_id: str, reason: str, detail: str = "", tool_call_id: str | None = None) -> None:
        self.reason, self.detail = reason, detail
        super().__init__(run_id, f"run needs review: {reason}" + (f" ({detail})" if detail else ""), tool_call_id)


class RunCancelled(ClientError):
    """The run was cancelled (or cancellation began) before the call finished."""

    def __init__(self, run_id: str, tool_call_id: str | None = None) -> None:
        super().__init__(run_id, "run cancelled", tool_call_id)


class RunEnded(ClientError):
    """The run completed or failed before the awaited call finished."""

    def __init__(self, run_id: str, status: str, tool_call_id: str | None = None) -> None:
        self.status = status
        super().__init__(run_id, f"run ended ({status}) before the call finished", tool_call_id)


class RunNotFound(ClientError):
    """No such run in the run-state topic (nor on the events log)."""

    def __init__(self, run_id: str) -> None:
        super().__init__(run_id, "no such run (start it with start_run, or check the topic prefix)")


class WaitTimeout(ClientError, TimeoutError):
    """Nothing decided within the timeout; the wait can be repeated (nothing was lost)."""

    def __init__(self, run_id: str, what: str, timeout_s: float, tool_call_id: str | None = None,
                 waiting: str | None = None) -> None:
        self.what, self.timeout_s = what, timeout_s
        self.waiting = waiting
        """Why the call waits when its capability is paused ("waiting: CAP paused by WHO: WHY"), else None."""
        why = waiting or "are the decider and dispatcher running?"
        super().__init__(run_id, f"no {what} within {timeout_s:g}s ({why})", tool_call_id)


class BadArgument(ClientError, ValueError):
    """An argument the client refuses before anything is sent; names the argument and the fix."""

    def __init__(self, run_id: str, argument: str, value: object, why: str) -> None:
        self.argument, self.value = argument, value
        super().__init__(run_id, f"{argument}={value!r}: {why}")


class ReplayDiverged(ClientError):
    """An agent's handler, re-entered after a restart or a reassignment, asked for a different
    step than the one the run's facts record at that position: the handler is not deterministic
    (docs/guide.md, "Agents that recover by themselves")."""

    def __init__(self, run_id: str, step: int, recorded: str, asked: str) -> None:
        self.step, self.recorded, self.asked = step, recorded, asked
        super().__init__(run_id, f"replay diverged at step {step}: the run's facts record {recorded}, the handler "
                                 f"now asks {asked}; a handler must take the same steps from the same facts (no "
                                 "clock, randomness or outside reads that change between attempts in its decisions)")


class Revoked(ClientError):
    """This process no longer owns the run (its partition moved to another agent process)."""

    def __init__(self, run_id: str) -> None:
        super().__init__(run_id, "the run moved to another agent process (partition reassigned)")

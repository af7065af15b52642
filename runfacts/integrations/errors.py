"""What the framework bridges raise, all `BridgeError` (a `RunfactsError`)."""

from __future__ import annotations

import re
from importlib import metadata

from runfacts.schemas.errors import RunfactsError


class BridgeError(RunfactsError):
    """Base of every error a framework bridge raises."""


class IncompatibleFramework(BridgeError, ImportError):
    """The installed framework version is outside the range the bridge supports (or missing);
    raised when the bridge module is imported, hence also an ImportError."""

    def __init__(self, package: str, found: str | None, supported: str, extra: str) -> None:
        self.package, self.found, self.supported = package, found, supported
        have = "is not installed" if found is None else f"{found} is installed"
        super().__init__(f"{package} {have}; runfacts.integrations supports {package}{supported}: "
                         f"pip install 'runfacts[{extra}]' (or '{package}{supported}')")

    @classmethod
    def check(cls, package: str, found: str | None, minimum: tuple[int, int], below: tuple[int, int],
              extra: str) -> None:
        """Raise unless `found` (major.minor...; None or "": not installed) is in [minimum, below)."""
        match = re.match(r"^(\d+)\.(\d+)", found or "")
        if not found or match is None or not (minimum <= (int(match[1]), int(match[2])) < below):
            low, high = (".".join(map(str, v)) for v in (minimum, below))
            raise cls(package, found or None, f">={low},<{high}", extra)


class ForgedResume(BridgeError):
    """A resume claims what runfacts never recorded ("approved" for a call it never approved, a
    denial or a tool result for a call a person may still approve): refused, nothing runs and the
    model is told nothing. Build resume values from runfacts' facts instead."""

    def __init__(self, run_id: str, tool_call_id: str, tool: str, status: str, reason: str,
                 claim: str = "approved") -> None:
        self.run_id, self.tool_call_id, self.tool, self.status = run_id, tool_call_id, tool, status
        self.claim = claim
        super().__init__(f"run {run_id}, tool call {tool_call_id} ({tool}): the resume says {claim} but runfacts "
                         f"says {status} ({reason}); nothing was executed. Resume with the results the bridge "
                         f"builds from runfacts' facts (resume_results, resume_state)")


class OutcomeNotKnown(BridgeError):
    """An authorized call was dispatched, then the run was cancelled, ended or sent to review
    before the call's outcome was recorded: it may have happened. Never told to a model as "not
    done"; runfacts settles it (the dispatcher's report or reconciliation)."""

    def __init__(self, run_id: str, tool_call_id: str, tool: str, ended: str) -> None:
        self.run_id, self.tool_call_id, self.tool = run_id, tool_call_id, tool
        super().__init__(f"{tool}: outcome not known yet. It was authorized and dispatched, then {ended}; it may "
                         f"have happened, so do not assume it did not: runfacts settles it (runfacts call "
                         f"{tool_call_id}) and will not run it again")


class UngatedTool(BridgeError):
    """A tool asked for approval, but names no runfacts capability to propose it as."""

    def __init__(self, tool: str) -> None:
        self.tool = tool
        super().__init__(f"tool {tool!r} requires approval but has no runfacts gate: add "
                         f"gates={{{tool!r}: Gate('<capabilityId>', target='<argument>')}}; the framework's own "
                         f"approval is not an authorization boundary")


def installed(package: str) -> str | None:
    """The installed version of a framework's distribution (None: not installed)."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None

"""The runfacts error hierarchy.

- `DomainError`: an expected rejection from a pure `decide`; the shell turns it into a
  typed `command.rejected` event. Carries run id, command id and a reason code.
- `InvalidInput`: bad bytes, unknown schema, failed validation. The message names
  `topic[partition]@offset`, the schema name and version, and what failed; the shell sends
  the record to the dead-letter topic with those facts as headers.
- `InfrastructureError`: broker, database or network trouble; says whether it is retryable.
- `ConfigError`: a setting with a bad value; names the setting and the value.
- `ContractViolation`: the shipped schema catalog breaks its rules (`runfacts schemas check`).
"""

from __future__ import annotations

from dataclasses import dataclass


class RunfactsError(Exception):
    """Base of every error runfacts raises on purpose."""


class DomainError(RunfactsError):
    """A command the current state does not allow (an expected outcome, not a bug)."""

    def __init__(self, run_id: str, command_id: str, reason: str, detail: str = "") -> None:
        self.run_id = run_id
        self.command_id = command_id
        self.reason = reason
        self.detail = detail
        super().__init__(f"run {run_id}: command {command_id} rejected: {reason}"
                         + (f" ({detail})" if detail else ""))


@dataclass(frozen=True)
class RecordPosition:
    """Where a record came from: topic[partition]@offset (all optional outside Kafka)."""

    topic: str | None = None
    partition: int | None = None
    offset: int | None = None

    def __str__(self) -> str:
        topic = self.topic or "<no topic>"
        part = "?" if self.partition is None else str(self.partition)
        off = "?" if self.offset is None else str(self.offset)
        return f"{topic}[{part}]@{off}"


class InvalidInput(RunfactsError):
    """Bytes or values that cannot become a valid runfacts record."""

    def __init__(
        self,
        what: str,
        *,
        position: RecordPosition | None = None,
        schema: str | None = None,
        version: int | None = None,
        reason: str | None = None,
    ) -> None:
        self.what = what
        self.position = position or RecordPosition()
        self.schema = schema
        self.version = version
        self.reason = reason  # a typed reason code (e.g. source_signature_invalid), as `dlq.reason`
        super().__init__(self._message())

    def _message(self) -> str:
        schema = self.schema or "<unknown schema>"
        version = "?" if self.version is None else str(self.version)
        return f"{self.position}: {schema} v{version}: {self.what}"

    def at(self, position: RecordPosition) -> InvalidInput:
        """The same error, located at a Kafka position (the shell knows it, the codec may not)."""
        return InvalidInput(self.what, position=position, schema=self.schema, version=self.version,
                            reason=self.reason)

    def headers(self) -> list[tuple[str, bytes]]:
        """Dead-letter headers describing this error."""
        pos = self.position
        pairs = {
            "dlq.topic": pos.topic or "",
            "dlq.partition": "" if pos.partition is None else str(pos.partition),
            "dlq.offset": "" if pos.offset is None else str(pos.offset),
            "dlq.schema": self.schema or "",
            "dlq.schemaVersion": "" if self.version is None else str(self.version),
            "dlq.error": self.what,
        }
        if self.reason is not None:
            pairs["dlq.reason"] = self.reason
        return [(k, v.encode()) for k, v in pairs.items()]


class InfrastructureError(RunfactsError):
    """Broker, database or network trouble."""

    def __init__(self, message: str, *, retryable: bool) -> None:
        self.retryable = retryable
        super().__init__(f"{message} ({'retryable' if retryable else 'not retryable'})")


class ConfigError(RunfactsError):
    """A configuration setting with a bad value."""

    def __init__(self, setting: str, value: object, why: str) -> None:
        self.setting = setting
        self.value = value
        super().__init__(f"setting {setting}={value!r}: {why}")


class ContractViolation(RunfactsError):
    """The shipped schema catalog breaks its own rules (edited old version, incompatible change)."""

    def __init__(self, schema: str, version: int | None, what: str) -> None:
        self.schema = schema
        self.version = version
        self.what = what
        where = schema if version is None else f"{schema} v{version}"
        super().__init__(f"{where}: {what}")

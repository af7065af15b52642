"""Dead letters, the library side of `runfacts dlq`: read them, plan a redrive, redrive.

A dead letter is the original key, value and headers plus the engine's reason headers
(`dlq.topic/partition/offset/schema/schemaVersion/error/app`, and `dlq.reason` when the
refusal has a typed code). `redrive` re-submits the
chosen letters to their original topic and, in the SAME Kafka transaction, appends a marker
to the dead-letter topic (`dlq.redriven` = the letter's position, `dlq.redrivenTo` = where
the copy went): the redrive is recorded where the letters live, `list` shows it, and a second
redrive skips what was already re-submitted (unless `--again`). A marker carries no value.
Filters (`--filter name=value`, repeatable, all must hold) match the reason headers by name
without the `dlq.` prefix; `error` matches a substring, the others exactly.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from confluent_kafka import Producer

from runfacts.logread import LogRecord
from runfacts.partitioning import WRONG_PARTITION
from runfacts.schemas.errors import ConfigError, InfrastructureError
from runfacts.settings import KafkaSettings
from runfacts.topics import redrive_transactional_id

REASONS = ("topic", "partition", "offset", "schema", "schemaVersion", "error", "app", "reason")
"""`dlq.<name>` headers; `reason` is a typed code where the refusal has one (e.g. source_key_retired)."""
MARK, MARK_TO, MARK_AT, FROM = "dlq.redriven", "dlq.redrivenTo", "dlq.redrivenAt", "dlq.redrivenFrom"


@dataclass(frozen=True)
class DeadLetter:
    """One dead letter: where it sits, why it is there, what it carried, whether it was redriven."""

    record: LogRecord
    reasons: dict[str, str]
    redriven_to: str = ""

    @property
    def position(self) -> str:
        return f"{self.record.topic}[{self.record.partition}]@{self.record.offset}"

    @property
    def original_headers(self) -> list[tuple[str, bytes]]:
        return [(k, v) for k, v in self.record.headers if not k.startswith("dlq.")]


def read_letters(records: Iterable[LogRecord]) -> list[DeadLetter]:
    """Dead letters in log order, each marked with where a redrive sent it (markers are not letters)."""
    letters, redriven = [], {}
    for record in records:
        headers = {k: v.decode(errors="replace") for k, v in record.headers if k.startswith("dlq.")}
        if MARK in headers:
            redriven[headers[MARK]] = headers.get(MARK_TO, "?")
        else:
            letters.append(DeadLetter(record, {r: headers.get(f"dlq.{r}", "") for r in REASONS}))
    return [DeadLetter(x.record, x.reasons, redriven.get(x.position, "")) for x in letters]


def parse_filters(pairs: Iterable[str]) -> dict[str, str]:
    """`name=value` pairs over the reason names (`dlq.` prefix optional); a bad one raises ConfigError."""
    filters = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        name = name.removeprefix("dlq.")
        if not sep or name not in REASONS:
            raise ConfigError("--filter", pair, f"expected name=value with name one of {', '.join(REASONS)}")
        filters[name] = value
    return filters


def matches(letter: DeadLetter, filters: dict[str, str]) -> bool:
    return all(want in letter.reasons["error"] if name == "error" else letter.reasons[name] == want
               for name, want in filters.items())


def redrive_plan(letters: list[DeadLetter], filters: dict[str, str], again: bool = False) -> list[DeadLetter]:
    """The letters a redrive re-submits: matching, with an original topic, not yet redriven (unless again)."""
    return [x for x in letters if matches(x, filters) and x.reasons["topic"] and (again or not x.redriven_to)]


def redrive(kafka: KafkaSettings, dlq_topic: str, plan: list[DeadLetter]) -> int:
    """Re-submit `plan` and record each redrive with a marker, all in one Kafka transaction."""
    if not plan:
        return 0
    producer = Producer(kafka.producer_config(**{"transactional.id": redrive_transactional_id(dlq_topic),
                                               "enable.idempotence": True}))
    producer.init_transactions(30)
    producer.begin_transaction()
    at = datetime.now(UTC).isoformat().encode()
    for letter in plan:
        target, partition = letter.reasons["topic"], letter.reasons["partition"]
        placed = partition.isdigit() and letter.reasons["reason"] != WRONG_PARTITION  # else its key's (murmur2)
        producer.produce(target, letter.record.value, letter.record.key,  # back to its own partition
                         partition=int(partition) if placed else -1,
                         headers=[*letter.original_headers, (FROM, letter.position.encode())])  # type: ignore[list-item]
        producer.produce(dlq_topic, None, letter.record.key,
                         headers=[(MARK, letter.position.encode()), (MARK_TO, target.encode()), (MARK_AT, at)])
    try:
        producer.commit_transaction(30)
    except Exception as exc:  # noqa: BLE001 - KafkaException carries the broker's reason
        raise InfrastructureError(f"redrive of {len(plan)} dead letters not committed: {exc}", retryable=True) from exc
    return len(plan)

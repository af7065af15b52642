"""Dead letters for the console: read with the one topic reader, redriven by `runfacts.ops.dlq`
with the same checks as `runfacts dlq redrive` (a letter with an original topic, not redriven
before; the re-submission and its marker in one Kafka transaction), and one more: only to
the topics a service may redrive to (`service_redrive_targets`: the commands topic), which
is what the dashboard principal's ACLs grant (`runfacts.security.acls`)."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass

from runfacts.logread import read_to_end
from runfacts.ops.dlq import DeadLetter, read_letters, redrive, redrive_plan
from runfacts.schemas.codec import Codec
from runfacts.schemas.errors import ConfigError, InvalidInput
from runfacts.schemas.pii import redact
from runfacts.settings import KafkaSettings
from runfacts.topics import TopicNames, service_redrive_targets


@dataclass(frozen=True)
class DeadLetters:
    """The dead-letter topic of `names`, read in groups under `group_prefix` (the dashboard's)."""

    kafka: KafkaSettings
    names: TopicNames
    group_prefix: str = "runfacts-dashboard"

    @property
    def topic(self) -> str:
        return self.names.dlq

    def read(self) -> list[DeadLetter]:
        records = read_to_end(self.kafka.bootstrap_servers, [self.topic], config=self.kafka.client_config(),
                              group_prefix=self.group_prefix)
        return read_letters(records[self.topic])

    def redrive(self, position: str) -> int:
        """Redrive the letter at `position` (as listed); ConfigError when it cannot be."""
        letters = self.read()
        if not any(x.position == position for x in letters):
            raise ConfigError("position", position, f"no dead letter there in {self.topic}: reload the page")
        plan = [x for x in redrive_plan(letters, {}) if x.position == position]
        if not plan:
            raise ConfigError("position", position, "already redriven, or it names no original topic")
        problem = preview(plan[0])[1]
        if problem:
            raise ConfigError("position", position, f"its record {problem}: a redrive would only make a new "
                              "dead letter of it. Fix the producer and send the record again; the letter stays "
                              "listed as evidence")
        targets = service_redrive_targets(self.names)
        if plan[0].reasons["topic"] not in targets:
            raise ConfigError("position", position, f"its original topic {plan[0].reasons['topic']} is not one the "
                              f"console redrives to ({', '.join(targets)}): a copy of a fact goes back to the log "
                              "only by an admin's `runfacts dlq redrive`")
        return redrive(self.kafka, self.topic, plan)


PREVIEW_CHARS = 300


@functools.cache
def _codec() -> Codec:
    return Codec()  # built on first use: importing the console must not need every generated model


def preview(letter: DeadLetter) -> tuple[str, str]:
    """(what the letter carries, why it cannot be decoded): the record decoded with its personal
    fields redacted, as short JSON (`PREVIEW_CHARS`); or ("", "does not decode: ...")."""
    value = letter.record.value
    if value is None:
        return "", "is empty (a tombstone)"
    try:
        model = _codec().decode(value)
    except (InvalidInput, ValueError, KeyError, TypeError) as exc:
        return "", f"does not decode: {str(exc)[:200]}"
    body = json.dumps(redact(model).model_dump(mode="json"), separators=(", ", ": "), default=str)
    return (body if len(body) <= PREVIEW_CHARS else body[:PREVIEW_CHARS] + f"... [+{len(body) - PREVIEW_CHARS}]"), ""


def run_of(letter: DeadLetter) -> str:
    """The run the letter's record is keyed by (its key, the run id), or ''."""
    key = letter.record.key
    return key.decode(errors="replace") if key else ""

"""Dead letters for the console: read with the one topic reader, redriven by `runfacts.ops.dlq`
with the same checks as `runfacts dlq redrive` (a letter with an original topic, not redriven
before; the re-submission and its marker in one Kafka transaction)."""

from __future__ import annotations

from dataclasses import dataclass

from runfacts.logread import read_to_end
from runfacts.ops.dlq import DeadLetter, read_letters, redrive, redrive_plan
from runfacts.schemas.errors import ConfigError
from runfacts.settings import KafkaSettings


@dataclass(frozen=True)
class DeadLetters:
    """The dead-letter topic `topic`, read in groups under `group_prefix` (the dashboard's)."""

    kafka: KafkaSettings
    topic: str
    group_prefix: str = "runfacts-dashboard"

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
        return redrive(self.kafka, self.topic, plan)

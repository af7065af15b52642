"""Where a partition resumes on assignment when its store holds input offsets (issue 18 item 6);
the broker side is held by tests/integration/test_engine_restore.py."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from runfacts.dev.apps import counter_app
from runfacts.processors.engine.runner import Engine
from runfacts.processors.engine.settings import EngineSettings
from runfacts.schemas.errors import InfrastructureError


class Committed:
    """A consumer's `committed` only (the one call the step makes)."""

    def __init__(self, offsets: dict[int, int] | None) -> None:
        self.offsets = offsets

    def committed(self, tps: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        if self.offsets is None:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT))
        return [TopicPartition(tp.topic, tp.partition, self.offsets[tp.partition]) for tp in tps]


def engine(tmp_path: Path, guarantee: str) -> Engine:
    e = Engine(counter_app(source="in"), EngineSettings(state_dir=tmp_path, guarantee=guarantee))
    e._tasks = {p: SimpleNamespace(state=SimpleNamespace(input_offsets={"in": 41}))  # type: ignore[misc]
                for p in (0, 1)}
    return e


@pytest.mark.parametrize("guarantee", ["exactly_once", "at_least_once"])
def test_group_offset_behind_or_missing_resumes_after_the_store_offset(
        tmp_path: Path, guarantee: str) -> None:
    tps = [TopicPartition("in", 0), TopicPartition("in", 1)]
    engine(tmp_path, guarantee)._skip_applied(Committed({0: -1001, 1: 0}), tps)  # type: ignore[arg-type]
    assert [tp.offset for tp in tps] == [42, 42]


def test_group_offset_ahead_of_the_store_is_kept(tmp_path: Path) -> None:
    tps = [TopicPartition("in", 0)]
    engine(tmp_path, "exactly_once")._skip_applied(Committed({0: 90}), tps)  # type: ignore[arg-type]
    assert tps[0].offset == TopicPartition("in", 0).offset  # untouched: the consumer uses the group's


def test_unreadable_group_offsets_fail_naming_the_partitions(tmp_path: Path) -> None:
    with pytest.raises(InfrastructureError, match=r"group offsets of \['in\[0\]'\] not readable"):
        engine(tmp_path, "exactly_once")._skip_applied(Committed(None), [TopicPartition("in", 0)])  # type: ignore[arg-type]

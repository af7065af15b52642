"""Regressions the deep type check (scripts/typecheck.sh) found at Kafka/model boundaries."""

from __future__ import annotations

from typing import NamedTuple

import pytest
from decider_support import create

from runfacts.ops.control import approval_decision
from runfacts.processors.engine.testdriver import MemoryLog
from runfacts.projections.audit.check import ChainCheck
from runfacts.projections.audit.verify import _event
from runfacts.projections.eventlog import EventReader
from runfacts.projections.facts import ReadSettings
from runfacts.projections.projector.replay import projectors
from runfacts.schemas import commands as cmd
from runfacts.schemas.codec import default_codec
from runfacts.schemas.errors import InvalidInput, RecordPosition
from runfacts.schemas.models import decode_event, new_command, payload_class

TOPIC = "runfacts.run.events"


class _Tombstone(NamedTuple):
    """A consumed record with no value, as `kafkalog.batches` yields it."""

    run: str

    def topic(self) -> str: return TOPIC  # noqa: E704
    def partition(self) -> int: return 0  # noqa: E704
    def offset(self) -> int: return 7  # noqa: E704
    def key(self) -> bytes | None: return self.run.encode()  # noqa: E704
    def value(self) -> bytes | None: return None  # noqa: E704


@pytest.mark.parametrize("settings", [ReadSettings(), ReadSettings(decode=False)])
def test_event_reader_raises_invalid_input_naming_the_position_when_the_value_is_a_tombstone(settings) -> None:
    with pytest.raises(InvalidInput, match=r"\[0\]@7.*tombstone"):
        EventReader(settings).fact(None, TOPIC, 0, 7)


@pytest.mark.parametrize("name", sorted(projectors()))
def test_replay_handler_raises_invalid_input_when_the_value_is_a_tombstone(name: str) -> None:
    handle = projectors()[name]().handler(TOPIC, lambda *_: None)
    with pytest.raises(InvalidInput, match="@7"):
        handle(None, 0, 7)


def test_audit_verify_reports_the_event_unreadable_when_it_is_a_tombstone() -> None:
    check = ChainCheck()
    _event(check, EventReader(ReadSettings(decode=False)), _Tombstone("run-9"))
    finding = check.findings["run-9"]
    assert (finding.kind, finding.where) == ("unreadable", f"{TOPIC}[0]@7")
    assert "tombstone" in finding.what


def test_decode_event_raises_invalid_input_when_the_record_is_a_command() -> None:
    codec = default_codec()
    with pytest.raises(InvalidInput, match="run.create is a command, not an event"):
        decode_event(codec, codec.encode(create()), RecordPosition(TOPIC, 0, 7))


def test_decode_event_raises_invalid_input_when_the_value_is_a_tombstone() -> None:
    with pytest.raises(InvalidInput, match=r"@7.*tombstone"):
        decode_event(default_codec(), None, RecordPosition(TOPIC, 0, 7))


def test_new_command_equals_the_constructor_when_given_a_concrete_command_class() -> None:
    made = create()
    fields = {name: getattr(made, name) for name in type(made).model_fields}
    assert new_command(cmd.CreateRun, **fields) == made
    assert payload_class(cmd.CreateRun) is cmd.CreateRunPayload


def test_approval_decision_names_the_value_when_it_is_neither_approve_nor_reject() -> None:
    assert approval_decision("reject") == "reject"
    with pytest.raises(ValueError, match="'maybe'"):
        approval_decision("maybe")


def test_memory_log_keeps_the_headers_as_produced_when_the_caller_edits_its_list_later() -> None:
    log, headers = MemoryLog(), [("h", b"1")]
    log.produce("t", b"v", b"k", headers=headers)
    headers.append(("late", None))
    log.commit()
    assert log.logs[("t", 0)][0].headers == [("h", b"1")]

"""The replay's fast paths give what the readable paths give, and bad bytes only typed errors.

`Projector.handler` (straight from Kafka values) against `Projector.apply` (Facts), and the
generated readers behind `EventReader` against fastavro on randomly mutated bytes: a value
fastavro reads exactly must read the same here; anything else must raise InvalidInput.
"""

from __future__ import annotations

import io
from collections import defaultdict
from functools import cache
from typing import Any

import pytest
from fastavro import parse_schema, schemaless_reader, schemaless_writer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from projection_support import run_values

from runfacts.dev.runscript import encode_event
from runfacts.projections.audit import reducer as audit
from runfacts.projections.eventlog import EventReader
from runfacts.projections.facts import ReadSettings
from runfacts.projections.projector.replay import AuditProjector, Projector, projectors
from runfacts.projections.trajectory import model as trajectory_model
from runfacts.projections.trajectory import reducer as trajectory
from runfacts.schemas.binary.readers import AvroDecodeError, compile_reader
from runfacts.schemas.catalog import default_catalog
from runfacts.schemas.errors import InvalidInput

TOPIC = "runfacts.run.events"
MUTATIONS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
Rows = dict[int, list[tuple[str, bytes | None]]]


def _log(runs: int = 6) -> list[tuple[bytes, int, int]]:
    """(value, partition, offset) of a scripted log over 3 partitions."""
    offsets: dict[int, int] = defaultdict(int)
    out = []
    for i, event in enumerate(run_values(seed=4, runs=runs)):
        partition = hash(event["runId"]) % 3 if i % 7 else 1
        out.append((encode_event(event), partition, offsets[partition]))
        offsets[partition] += 1
    return out


def _collect(rows: Rows) -> Any:
    def emit(partition: int, key: str, body: bytes | None) -> None:
        rows[partition].append((key, body))
    return emit


def _through_apply(projector: Projector, log: list[tuple[bytes, int, int]]) -> Rows:
    rows: Rows = defaultdict(list)
    reader = EventReader(projector.read)
    for value, partition, offset in log:
        projector.apply(reader.fact(value, TOPIC, partition, offset), _collect(rows))
    projector.finish(_collect(rows))
    return dict(rows)


def _through_handler(projector: Projector, log: list[tuple[bytes, int, int]]) -> Rows:
    rows: Rows = defaultdict(list)
    handle = projector.handler(TOPIC, _collect(rows))
    for value, partition, offset in log:
        handle(value, partition, offset)
    projector.finish(_collect(rows))
    return dict(rows)


def test_handlers_give_the_records_of_apply_when_fed_the_same_log() -> None:
    log = _log()
    for name, make in projectors().items():
        assert _through_handler(make(), log) == _through_apply(make(), log), name


_VALUES = [value for value, _, _ in _log(runs=3)]
_WHOLE, _PARTIAL = EventReader(), EventReader(trajectory.READS)  # compiled once


def _mutated(data: st.DataObject) -> bytes:
    """An event value with a few bytes of its body changed, cut off or inserted."""
    value = bytearray(data.draw(st.sampled_from(_VALUES)))
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(10, len(value) - 1))
        kind = data.draw(st.sampled_from(["set", "cut", "insert"]))
        if kind == "set":
            value[at] = data.draw(st.integers(0, 255))
        elif kind == "cut":
            del value[at:]
        else:
            value[at:at] = data.draw(st.binary(min_size=1, max_size=3))
        if len(value) <= 11:
            break
    return bytes(value)


def _fastavro(value: bytes) -> tuple[dict[str, Any] | None, bool]:
    """The event fastavro reads from the value's body if it reads it exactly (else None), and
    whether the body is the canonical encoding of what it read (fastavro also reads some bad
    bytes, e.g. a negative union index picks a branch from the end: those may be refused)."""
    entry = default_catalog().by_fingerprint[value[2:10]]
    schema = _epoch_ms_schema(value[2:10])
    stream = io.BytesIO(value[10:])
    try:
        read = schemaless_reader(stream, schema, None)
    except Exception:  # noqa: BLE001 - any failure means fastavro refuses the bytes
        return None, False
    exact = stream.tell() == len(value) - 10
    same = (read["eventType"], read["schemaVersion"]) == (entry.type_name, entry.version)
    if not (exact and same):
        return None, False
    out = io.BytesIO()
    schemaless_writer(out, schema, read)
    return read, out.getvalue() == value[10:]


@cache
def _epoch_ms_schema(fingerprint: bytes) -> Any:
    """The writer schema without logical types: timestamps stay epoch ms, as facts hold them."""
    def strip(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: strip(v) for k, v in node.items() if k != "logicalType"}
        return [strip(x) for x in node] if isinstance(node, list) else node
    return parse_schema(strip(default_catalog().by_fingerprint[fingerprint].raw))


@MUTATIONS
@given(st.data())
def test_event_reader_reads_what_fastavro_reads_or_raises_invalid_input_when_bytes_are_mutated(
        data) -> None:
    value = _mutated(data)
    expected, canonical = _fastavro(value)
    try:
        fact = _WHOLE.fact(value, TOPIC, 0, 7)
    except InvalidInput as exc:
        assert not canonical, f"valid bytes refused: {exc}"
        assert "@7" in str(exc)
        return
    assert expected is not None, "bytes fastavro refuses were read"
    assert fact.event == expected


@MUTATIONS
@given(st.data())
def test_partial_reader_raises_only_invalid_input_when_bytes_are_mutated(data) -> None:
    value = _mutated(data)
    try:
        fact = _PARTIAL.fact(value, TOPIC, 0, 7)
    except InvalidInput:
        return
    expected = _fastavro(value)[0]
    if expected is not None and fact.event is not None:  # what was read is what was written
        assert {k: v for k, v in expected.items() if k in fact.event and k != "payload"} == \
            {k: v for k, v in fact.event.items() if k != "payload"}


@MUTATIONS
@given(st.data())
def test_audit_handler_raises_only_typed_errors_when_bytes_are_mutated(data) -> None:
    value = _mutated(data)
    rows: Rows = defaultdict(list)
    try:
        AuditProjector().handler(TOPIC, _collect(rows))(value, 0, 7)
    except (InvalidInput, AvroDecodeError):
        assert not rows
        return
    assert len(rows[0]) == 1


def test_readers_raise_invalid_input_when_a_value_is_cut_inside_what_they_read() -> None:
    for value in _VALUES:
        entry = default_catalog().by_fingerprint[value[2:10]]
        bytes_only = EventReader(ReadSettings(decode=False)).fact(value, TOPIC, 0, 7)
        read_to = len(value) if entry.type_name in (trajectory.READS.payloads or {}) \
            else 10 + audit.summarize(bytes_only).envelope_end
        for cut in range(11, read_to):
            for reader in (_WHOLE, _PARTIAL):
                with pytest.raises(InvalidInput, match="@7"):
                    reader.fact(value[:cut], TOPIC, 0, 7)


def test_compiled_reader_raises_when_the_last_string_runs_past_the_buffer() -> None:
    schema = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "long"},
                                                        {"name": "b", "type": "string"}]}
    read = compile_reader(schema)
    assert read(b"\x02\x06abc", 0) == ({"a": 1, "b": "abc"}, 5)
    with pytest.raises(AvroDecodeError, match="truncated"):
        read(b"\x02\x06ab", 0)
    with pytest.raises(AvroDecodeError, match="truncated"):
        compile_reader(schema, {"a": None})(b"\x02\x06ab", 0)


def test_trajectory_reads_only_what_it_needs_when_folding_equals_a_full_read() -> None:
    events = run_values(seed=9, runs=40)
    types = {e["eventType"] for e in events}
    assert len(types & set(trajectory.HANDLERS)) >= 25  # the log exercises nearly every rule
    folded = []
    for reader in (EventReader(trajectory.READS), _WHOLE):
        views: dict[str, trajectory_model.State] = {}
        for offset, event in enumerate(events):
            fact = reader.fact(encode_event(event), TOPIC, 0, offset)
            views[event["runId"]] = trajectory.evolve(views.get(event["runId"]), fact)
        folded.append({run: trajectory_model.encode(view) for run, view in views.items()})
    assert folded[0] == folded[1]

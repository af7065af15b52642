"""Run state JSON: `load_state` reads a stored record of any released shape (migrated, see
`RUN_STATE`); `dump_state` writes exactly `RunState.model_dump_json()`, reusing the parts that did not change.

A run's state grows with its tool calls and approvals, but one command changes one or two of
them: `evolve` keeps every other `ToolCallState` / `ApprovalState` object as it was. So the
JSON of each of those objects is kept (by identity) from the run's previous dump, and only the
changed ones and the run's own fields are serialized again — by pydantic itself, so the bytes
are the same (a property test compares them over random runs).
"""

from __future__ import annotations

from typing import Any

from pydantic_core import to_json

from runfacts.processors.decider.state import STATE_FORMAT, RunState
from runfacts.processors.engine.versions import Migrations
from runfacts.schemas.construct import trusted

Parts = dict[str, tuple[Any, bytes]]
"""Per map ("approvals", "toolCalls"): key -> (the value object, its `"key":{...}` JSON)."""



def _settled_pairs(value: dict[str, Any]) -> dict[str, Any]:
    """1 -> 2: `settledCalls` values were "how:argsHashPrefix" strings (bb727c6 made them pairs;
    the unmarked records in between already hold pairs, which pass as they are)."""
    settled = value.get("settledCalls")
    if not settled:
        return value
    pairs = {}
    for call, kept in settled.items():
        if isinstance(kept, str):
            how, _, args = kept.rpartition(":")
            kept = [how, args]
        pairs[call] = kept
    return {**value, "settledCalls": pairs}


RUN_STATE = Migrations("run state", STATE_FORMAT, {1: _settled_pairs})
"""The run state's shapes: 1 unmarked (no settledCalls, then ':'-joined, then pairs), 2 marked."""


def load_state(raw: bytes) -> RunState:
    """A stored run state (decider store, run-state topic, dispatcher store) of any known version,
    as today's `RunState`; `NewerStoredVersion` when a newer runfacts wrote it."""
    if RUN_STATE.is_current(raw):
        return RunState.model_validate_json(raw)
    return RunState.model_validate(RUN_STATE.read_json(raw))


_EMPTY_MAPS = b'"approvals":{},"toolCalls":{},'
_SERIALIZE = RunState.__pydantic_serializer__.to_json


def dump_state(state: RunState, previous: dict[str, Parts] | None = None) -> tuple[bytes, dict[str, Parts]]:
    """The state's JSON bytes, and the parts to pass as `previous` for the run's next dump."""
    values = state.__dict__
    if not values["approvals"] and not values["toolCalls"]:
        return _SERIALIZE(state), {}
    body = _SERIALIZE(trusted(RunState, {**values, "approvals": {}, "toolCalls": {}}))
    head, found, tail = body.partition(_EMPTY_MAPS)
    if not found:  # cannot happen: the two maps are adjacent fields; stay correct regardless
        return _SERIALIZE(state), {}
    parts: dict[str, Parts] = {}
    chunks = [head]
    for name in ("approvals", "toolCalls"):
        parts[name] = _parts(values[name], (previous or {}).get(name, {}))
        chunks += [b'"', name.encode(), b'":{', b",".join(p[1] for p in parts[name].values()), b"},"]
    chunks.append(tail)
    return b"".join(chunks), parts


def _parts(items: dict[str, Any], previous: Parts) -> Parts:
    out: Parts = {}
    for key, value in items.items():
        known = previous.get(key)
        if known is not None and known[0] is value:
            out[key] = known
        else:
            out[key] = (value, to_json(key) + b":" + type(value).__pydantic_serializer__.to_json(value))
    return out

"""Run state JSON: `load_state` reads a stored record of any released shape (migrated, see
`RUN_STATE`); `dump_state` writes exactly `RunState.model_dump_json()`, reusing the parts that did not change.

A run's state grows with its tool calls and approvals, but one command changes one or two of
them: `evolve` keeps every other `ToolCallState` / `ApprovalState` object as it was. So the
JSON of each of those objects is kept (by identity) from the run's previous dump, and only the
changed ones and the run's own fields are serialized again. The serializer is msgspec's JSON
encoder walking the models' field values (`__dict__`, in field order): the bytes pydantic's
`model_dump_json` writes, about five times faster (property tests compare them over random
states, contract tests over the golden states).
"""

from __future__ import annotations

from typing import Any

import msgspec
from pydantic import BaseModel

from runfacts.processors.decider.state import DEDUPE_WINDOW, STATE_FORMAT, RunState, command_digest
from runfacts.processors.engine.versions import Migrations
from runfacts.processors.policy.access import requesters
from runfacts.schemas.common import Actor

Parts = dict[str, tuple[Any, msgspec.Raw]]
"""Per map ("approvals", "toolCalls"): key -> (the value object, its JSON)."""



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


def _window_digests(value: dict[str, Any]) -> dict[str, Any]:
    """2 -> 3: the dedupe window was `recentCommands`, the command ids themselves; it is their
    digests (`command_digest`), oldest first, concatenated into `recentCommandDigests`."""
    out = {k: v for k, v in value.items() if k != "recentCommands"}
    ids = value.get("recentCommands") or ()
    out["recentCommandDigests"] = "".join(command_digest(c) for c in list(ids)[-DEDUPE_WINDOW:])
    return out


def _approval_requesters(value: dict[str, Any]) -> dict[str, Any]:
    """3 -> 4: an approval named one `requestedBy` (the run's creator, even a service identity); it
    holds its `requesters` (`policy.access.requesters`: the run's user, the creator when a person)."""
    who = requesters(value["userId"], Actor.model_validate(value["createdBy"]))
    approvals = {}
    for approval_id, approval in (value.get("approvals") or {}).items():
        kept = {k: v for k, v in approval.items() if k != "requestedBy"}
        approvals[approval_id] = {**kept, "requesters": list(who)}
    return {**value, "approvals": approvals}


def _no_holds(value: dict[str, Any]) -> dict[str, Any]:
    """4 -> 5: a tool call may be `held` (its capability paused, `tool.call.held`); no call of a
    state written before could be, so the shape is read as it is (`held` defaults to None)."""
    return value


RUN_STATE = Migrations("run state", STATE_FORMAT, {1: _settled_pairs, 2: _window_digests, 3: _approval_requesters,
                                                   4: _no_holds})
"""The run state's shapes: 1 unmarked (no settledCalls, then ':'-joined, then pairs), 2 marked,
3 the dedupe window as digests, 4 an approval's requesters, 5 a call's hold (a paused capability)."""


def load_state(raw: bytes) -> RunState:
    """A stored run state (decider store, run-state topic, dispatcher store) of any known version,
    as today's `RunState`; `NewerStoredVersion` when a newer runfacts wrote it."""
    if RUN_STATE.is_current(raw):
        return RunState.model_validate_json(raw)
    return RunState.model_validate(RUN_STATE.read_json(raw))


def _fields(value: Any) -> Any:
    """A state model as msgspec encodes it: its field values, in field order (its `__dict__`)."""
    if isinstance(value, BaseModel):
        return value.__dict__
    raise TypeError(f"the run state JSON has no encoding for {type(value).__name__}")


_ENCODE = msgspec.json.Encoder(enc_hook=_fields).encode
_MAPS = ("approvals", "toolCalls")


def dump_state(state: RunState, previous: dict[str, Parts] | None = None) -> tuple[bytes, dict[str, Parts]]:
    """The state's JSON bytes, and the parts to pass as `previous` for the run's next dump."""
    values = state.__dict__
    before = previous or {}
    parts = {name: _parts(values[name], before.get(name, {})) for name in _MAPS}
    body = {**values, **{name: {key: part[1] for key, part in parts[name].items()} for name in _MAPS}}
    return _ENCODE(body), parts


def _parts(items: dict[str, Any], previous: Parts) -> Parts:
    out: Parts = {}
    for key, value in items.items():
        known = previous.get(key)
        out[key] = known if known is not None and known[0] is value else (value, msgspec.Raw(_ENCODE(value)))
    return out

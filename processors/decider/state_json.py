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

from collections.abc import Iterable
from typing import Any

import msgspec
from pydantic import BaseModel
from pydantic_core import from_json

from runfacts.processors.decider.state import (
    DEDUPE_WINDOW,
    EVIDENCE_TYPES,
    EVIDENCE_WINDOW,
    STATE_FORMAT,
    RunState,
    command_digest,
)
from runfacts.processors.engine.versions import FIELD, UNMARKED, Migrations
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


def _child_runs(value: dict[str, Any]) -> dict[str, Any]:
    """4 -> 5: child runs (docs/decisions/0012-child-runs.md): no parent, no children, nothing
    reserved, an empty evidence ledger (a run of format 4 never had any)."""
    budget = {**value["budget"], "reserved": {}}
    return {**value, "budget": budget, "parentRunId": None, "children": {}, "evidenceItems": {}}


def _compensations(value: dict[str, Any]) -> dict[str, Any]:
    """5 -> 6: a run holds its compensation plans and why it compensates; a run stored before had
    no compensation declared to plan: none, and it does not compensate."""
    return {**value, "compensations": {}, "compensating": None}


def _no_holds(value: dict[str, Any]) -> dict[str, Any]:
    """6 -> 7: a tool call may be `held` (its capability paused, `tool.call.held`); no call of a
    state written before could be, so the shape is read as it is (`held` defaults to None)."""
    return value


def _no_resolutions(value: dict[str, Any]) -> dict[str, Any]:
    """7 -> 8: a compensation plan counts a person's retries and holds their resolution
    (`compensation.resolved`); no plan of a state written before had one, so the shape is read as
    it is (`retries` 0, `resolution` None)."""
    return value


RUN_STATE = Migrations("run state", STATE_FORMAT, {1: _settled_pairs, 2: _window_digests, 3: _approval_requesters,
                                                   4: _child_runs, 5: _compensations, 6: _no_holds,
                                                   7: _no_resolutions})
"""The run state's shapes: 1 unmarked (no settledCalls, then ':'-joined, then pairs), 2 marked,
3 the dedupe window as digests, 4 an approval's requesters, 5 child runs and the evidence ledger,
6 compensation plans, 7 a call's hold (a paused capability), 8 a plan's retries and resolution
(a person's `compensation.resolve`)."""


def load_state(raw: bytes) -> RunState:
    """A stored run state (decider store, run-state topic, dispatcher store) of any known version,
    as today's `RunState`; `NewerStoredVersion` when a newer runfacts wrote it."""
    if RUN_STATE.is_current(raw):
        return RunState.model_validate_json(raw)
    return RunState.model_validate(RUN_STATE.read_json(raw))


def lacks_evidence(raw: bytes) -> bool:
    """A record stored before the run kept its evidence (`RunState.evidence`, added at version 2
    by e740ec1 without a version bump): version 1, or 2 without the key. Read as it is, its
    evidence is empty although the run has evidence-grade events: `with_evidence` rebuilds it."""
    if RUN_STATE.is_current(raw) or b'"evidence":' in raw:
        return False
    value = from_json(raw)  # only old records get here (once per run, the first time it is loaded)
    version = value.get(FIELD, UNMARKED) if isinstance(value, dict) else None
    return type(version) is int and version <= EVIDENCE_UNMARKED


EVIDENCE_UNMARKED = 2
"""The last version whose records may lack `evidence` (it was added within version 2)."""


def with_evidence(state: RunState, events: Iterable[tuple[str, str]]) -> RunState:
    """`state` with its evidence window rebuilt from the run's events ((eventId, eventType), in log
    order): what folding them through today's `evolve` keeps (the last `EVIDENCE_WINDOW`)."""
    ids = [event_id for event_id, event_type in events if event_type in EVIDENCE_TYPES]
    return state.model_copy(update={"evidence": tuple(ids[-EVIDENCE_WINDOW:])})


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

"""The decider's state JSON is exactly `RunState.model_dump_json()`, reused parts or not."""

from __future__ import annotations

import types
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, Union, get_args, get_origin

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from runfacts.processors.decider.state import ApprovalState, RunState, ToolCallState
from runfacts.processors.decider.state_json import dump_state
from runfacts.schemas.construct import trusted

PROPERTY = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TEXT = st.text(max_size=8)  # any code point but surrogates: quotes, backslashes, control characters
MOMENTS = st.integers(0, 4_102_444_800_000).map(
    lambda ms: datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms))


def _of(annotation: Any) -> st.SearchStrategy[Any]:
    """Values of one field type of the run state."""
    origin, args = get_origin(annotation), get_args(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return models(annotation)
    if origin in (Union, types.UnionType):
        return st.one_of(*[st.none() if a is type(None) else _of(a) for a in args])
    if origin is Literal:
        return st.sampled_from(args)
    if origin is tuple and args[-1] is Ellipsis:
        return st.lists(_of(args[0]), max_size=3).map(tuple)
    if origin is tuple:  # fixed length, e.g. settledCalls' (how it ended, argsHash prefix)
        return st.tuples(*map(_of, args))
    if origin is dict:
        return st.dictionaries(TEXT, _of(args[1]), max_size=3)
    simple = {str: TEXT, int: st.integers(-2**63, 2**63 - 1), bool: st.booleans(), datetime: MOMENTS}
    return simple[annotation]


def models(cls: type[BaseModel]) -> st.SearchStrategy[Any]:
    """Valid instances of a state model, every field random."""
    fields = {name: _of(info.annotation) for name, info in cls.model_fields.items()}
    return st.fixed_dictionaries(fields).map(cls.model_validate)


def _next(state: RunState, call: ToolCallState, approval: ApprovalState) -> RunState:
    """The state after an evolve-like change: one call replaced, one approval added, others kept."""
    calls = dict(state.toolCalls)
    if calls:
        calls[next(iter(calls))] = call
    calls["new-call"] = call
    return trusted(RunState, {**state.__dict__, "version": state.version + 1, "toolCalls": calls,
                              "approvals": {**state.approvals, "new-approval": approval}})


@PROPERTY
@given(models(RunState), models(ToolCallState), models(ApprovalState))
def test_state_json_equals_model_dump_json_when_parts_are_reused(state, call, approval) -> None:
    body, parts = dump_state(state)
    assert body == state.model_dump_json().encode()
    after = _next(state, call, approval)
    again, _ = dump_state(after, parts)
    assert again == after.model_dump_json().encode()
    assert RunState.model_validate_json(again) == after


@PROPERTY
@given(models(RunState))
def test_state_json_reuses_every_part_when_nothing_changed(state) -> None:
    _, parts = dump_state(state)
    body, again = dump_state(state, parts)
    assert body == state.model_dump_json().encode()
    for name in ("approvals", "toolCalls"):
        assert all(again[name][k] is parts[name][k] for k in getattr(state, name))

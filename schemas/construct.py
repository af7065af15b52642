"""Trusted, fast conversion between contract models and the dicts fastavro reads and writes.

`build(cls, values)` skips pydantic validation: use it only for values the Avro reader has
already checked against the model's own schema (types, enums, nullability). Pattern
constraints are not re-checked on that path. `dump(model)` is the inverse, without the
generic serializer's overhead.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from functools import cache
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel

Convert = Callable[[Any], Any]
_new = object.__new__
_set = object.__setattr__
# pydantic v2 keeps these in slots; their descriptors set them faster than __setattr__.
_fields_set = vars(BaseModel)["__pydantic_fields_set__"].__set__
_extra = vars(BaseModel)["__pydantic_extra__"].__set__
_private = vars(BaseModel)["__pydantic_private__"].__set__


def trusted(cls: type[BaseModel], values: dict[str, Any]) -> Any:
    """An instance holding `values` as is (no validation, no copies)."""
    obj = _new(cls)
    _set(obj, "__dict__", values)
    _fields_set(obj, _set_of(cls, values))
    _extra(obj, None)
    _private(obj, None)
    return obj


def build(cls: type[BaseModel], values: dict[str, Any]) -> Any:
    """Model from an Avro-read dict (consumed: nested values are replaced in place)."""
    return builder(cls)(values)


@cache
def builder(cls: type[BaseModel]) -> Callable[[dict[str, Any]], Any]:
    """`build` for one class, with its nested conversions resolved once."""
    steps = _builders(cls)

    def make(values: dict[str, Any]) -> Any:
        for name, convert in steps:
            values[name] = convert(values[name])
        obj = _new(cls)
        _set(obj, "__dict__", values)
        _fields_set(obj, _set_of(cls, values))
        _extra(obj, None)
        _private(obj, None)
        return obj

    return make


_ALL_FIELDS: dict[type[BaseModel], set[str]] = {}


def _set_of(cls: type[BaseModel], values: dict[str, Any]) -> set[str]:
    """`set(values)`; when `values` holds as many names as `cls` has fields (a copy of a model's
    `__dict__`, nearly always: every field, since `trusted` values must be the model's fields),
    one set shared by all such instances of the class. Sharing is safe: pydantic
    copies the set before it changes a copy's (`model_copy`, `__copy__`) and otherwise only adds
    a field name to it, which an all-fields set already holds. A run state's copy no longer
    allocates a 30-name set (about 2 KB) for every command."""
    shared = _ALL_FIELDS.get(cls)
    if shared is None:
        shared = _ALL_FIELDS[cls] = set(cls.model_fields)
    return shared if len(values) == len(shared) else set(values)


def dump(model: BaseModel) -> dict[str, Any]:
    """The model as the plain dict fastavro writes (nested models become dicts)."""
    values = dict(model.__dict__)
    for name, convert in _dumpers(type(model)):
        values[name] = convert(values[name])
    return values


@cache
def _builders(cls: type[BaseModel]) -> tuple[tuple[str, Convert], ...]:
    plan = ((name, _converter(info.annotation, _build_of)) for name, info in
            cls.model_fields.items())
    return tuple((name, convert) for name, convert in plan if convert is not None)


@cache
def _dumpers(cls: type[BaseModel]) -> tuple[tuple[str, Convert], ...]:
    plan = ((name, _converter(info.annotation, _dump_of)) for name, info in
            cls.model_fields.items())
    return tuple((name, convert) for name, convert in plan if convert is not None)


def _build_of(cls: type[BaseModel]) -> Convert:
    return builder(cls)


def _dump_of(cls: type[BaseModel]) -> Convert:
    return dump


def _converter(annotation: Any, of_model: Callable[[type[BaseModel]], Convert]) -> Convert | None:
    """How to convert one field's value, or None when it passes through unchanged."""
    origin = get_origin(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return of_model(annotation)
    if origin in (Union, types.UnionType):
        branches = [a for a in get_args(annotation) if a is not type(None)]
        inner = _converter(branches[0], of_model) if len(branches) == 1 else None
        return None if inner is None else (lambda v: None if v is None else inner(v))
    if origin is tuple:
        item = _converter(get_args(annotation)[0], of_model)
        if of_model is _dump_of:
            return list if item is None else (lambda v: [item(x) for x in v])
        return tuple if item is None else (lambda v: tuple(item(x) for x in v))
    return None

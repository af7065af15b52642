"""What the run state would cost as msgspec Structs instead of pydantic models (docs/decider.md "Speed").

    .venv/bin/python benchmarks/state_struct_probe.py [--commands 6000] [--runs 150]

Folds `decider_load`'s commands through the real decider, mirrors each final `RunState` as a
frozen msgspec Struct generated from `RunState.model_fields` (same fields, same order), and
times, best of 7 (CPU, per state): a copy with three fields changed (`trusted` vs
`msgspec.structs.replace`), one tool call replaced, the whole state's JSON, and decode +
validate of that JSON. It also checks that msgspec writes the same JSON bytes.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
import types
import typing
from pathlib import Path
from typing import Any, get_args, get_origin

import msgspec
from pydantic import BaseModel

sys.path.insert(0, str(Path(__file__).parent))
from decider_load import CTX, generate  # noqa: E402

from runfacts.processors.decider.core import decide_evolve  # noqa: E402
from runfacts.processors.decider.state import RunState  # noqa: E402
from runfacts.schemas import codec  # noqa: E402
from runfacts.schemas.construct import trusted  # noqa: E402

_STRUCTS: dict[type, Any] = {}


def _mirror(annotation: Any) -> Any:
    origin, args = get_origin(annotation), get_args(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return struct_of(annotation)
    if origin in (typing.Union, types.UnionType):
        return typing.Union[tuple(_mirror(a) for a in args)]  # noqa: UP007
    if origin is tuple:
        return tuple[tuple(a if a is Ellipsis else _mirror(a) for a in args)]
    if origin is dict:
        return dict[_mirror(args[0]), _mirror(args[1])]  # type: ignore[misc]
    return annotation


def struct_of(cls: type[BaseModel]) -> Any:
    """A frozen Struct with `cls`'s fields, in order, with their defaults."""
    if cls not in _STRUCTS:
        fields = []
        for name, info in cls.model_fields.items():
            kind = _mirror(info.annotation)
            if info.is_required():
                fields.append((name, kind))
            elif isinstance(info.default, dict):
                fields.append((name, kind, msgspec.field(default_factory=dict)))
            else:
                fields.append((name, kind, info.default))
        _STRUCTS[cls] = msgspec.defstruct(cls.__name__, fields, frozen=True, kw_only=True)
    return _STRUCTS[cls]


def _best(step: Any, count: int) -> float:
    best = float("inf")
    for _ in range(7):
        start = time.process_time()
        step()
        best = min(best, time.process_time() - start)
    return best / count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--commands", type=int, default=6000)
    parser.add_argument("--runs", type=int, default=150)
    args = parser.parse_args()
    gc.disable()
    states: dict[str, Any] = {}
    for _key, value in generate(args.commands, args.runs):
        command = codec.decode(value)
        _events, states[command.runId] = decide_evolve(command, states.get(command.runId), CTX)
    models = list(states.values())
    mirror = struct_of(RunState)
    raw = [m.model_dump_json().encode() for m in models]
    structs = [msgspec.json.decode(r, type=mirror) for r in raw]
    encode = msgspec.json.Encoder().encode
    call = next(iter(models[0].toolCalls))
    n = len(models)
    print(f"{n} run states, ~{sum(map(len, raw)) // n} bytes of JSON, {len(models[0].toolCalls)} calls each")
    rows = [
        ("copy, 3 fields changed",
         lambda: [trusted(RunState, {**m.__dict__, "version": 1, "updatedAt": m.createdAt, "status": "running"})
                  for m in models],
         lambda: [msgspec.structs.replace(s, version=1, updatedAt=s.createdAt, status="running") for s in structs]),
        ("one tool call replaced",
         lambda: [{**m.toolCalls, call: trusted(type(m.toolCalls[call]), {**m.toolCalls[call].__dict__, "attempts": 2})}
                  for m in models],
         lambda: [{**s.toolCalls, call: msgspec.structs.replace(s.toolCalls[call], attempts=2)} for s in structs]),
        ("state JSON, whole", lambda: [m.model_dump_json() for m in models], lambda: [encode(s) for s in structs]),
        ("decode + validate JSON", lambda: [RunState.model_validate_json(r) for r in raw],
         lambda: [msgspec.json.decode(r, type=mirror) for r in raw]),
    ]
    for name, pydantic_step, struct_step in rows:
        a, b = _best(pydantic_step, n), _best(struct_step, n)
        print(f"{name:24s} pydantic {a:7.1f} µs   msgspec Struct {b:7.1f} µs   {a / b:4.1f}x")
    same = sum(encode(s) == r for s, r in zip(structs, raw, strict=True))
    print(f"msgspec JSON byte-identical to model_dump_json for {same}/{n} states")


if __name__ == "__main__":
    main()

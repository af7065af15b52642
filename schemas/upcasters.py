"""Upcasters: turn a value written by an old schema version into the current model's values.

Avro schema resolution runs first and does the shape changes a schema can declare (new
fields get their defaults, aliased fields are renamed). An upcaster does what a schema
cannot: fix up values. `UPCASTERS[(type, n)]` takes the dict of a version-n value, already
in the current reader's shape, and returns the version n+1 values; a step without an
upcaster only bumps `schemaVersion`. Upcasters are pure functions of the dict.

Because they see the current shape, an upcaster written for an older step may need an
edit when a newer version renames a field it touches; the golden-file tests (every shipped
version decoded and upcast) catch that.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]

_NOT_SNAKE = re.compile(r"[^a-z0-9]+")


def snake_case(text: str) -> str:
    """'HTTP 429 Too Many' -> 'http_429_too_many'; empty or digit-leading text gets 'e_'."""
    words = _NOT_SNAKE.sub("_", re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", text).lower()).strip("_")
    return words if words[:1].isalpha() else f"e_{words}"


def tool_call_failed_v1_to_v2(values: dict[str, Any]) -> dict[str, Any]:
    """v1 took any errorClass text; v2 wants snake_case codes ('RateLimited' -> 'rate_limited')."""
    payload = dict(values["payload"])
    payload["errorClass"] = snake_case(payload["errorClass"])
    return {**values, "payload": payload}


UPCASTERS: dict[tuple[str, int], Upcaster] = {
    ("tool.call.failed", 1): tool_call_failed_v1_to_v2,
}


def upcast(values: dict[str, Any], type_name: str, current: int,
           upcasters: dict[tuple[str, int], Upcaster] | None = None) -> dict[str, Any]:
    """Apply each step from the value's schemaVersion up to `current`."""
    steps = UPCASTERS if upcasters is None else upcasters
    version = values["schemaVersion"]
    while version < current:
        step = steps.get((type_name, version))
        if step is not None:
            values = step(values)
        version += 1
        values["schemaVersion"] = version
    return values

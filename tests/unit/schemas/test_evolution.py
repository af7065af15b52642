"""Evolution: old versions read through Avro resolution and the upcaster chain."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runfacts.schemas.catalog import default_catalog
from runfacts.schemas.codec import Codec, CodecSettings
from runfacts.schemas.errors import InvalidInput
from runfacts.schemas.events import ToolCallFailed
from runfacts.schemas.spec.samples import sample
from runfacts.schemas.upcasters import snake_case, upcast

GOLDEN = Path(__file__).parents[2] / "contract" / "golden" / "events"
CATALOG = default_catalog()
STRICT = Codec(CodecSettings(validate=True))
TRUSTED = Codec(CodecSettings(validate=False))


def test_tool_call_failed_v1_is_upcast_to_v2_when_legacy_golden_bytes_are_decoded() -> None:
    data = (GOLDEN / "ToolCallFailed.v1.legacy.avro").read_bytes()
    model = STRICT.decode(data)
    assert isinstance(model, ToolCallFailed)
    assert model.schemaVersion == 2
    assert model.payload.errorClass == "rate_limited"
    assert model.payload.detail == "HTTP 429 Too Many Requests"
    assert model.payload.retryAfterMs is None
    assert TRUSTED.decode(data) == model


def test_decode_dict_returns_current_shape_when_v1_is_encoded_today() -> None:
    values = sample(CATALOG.entry("tool.call.failed", 1))
    values["payload"]["errorClass"] = "ServerError"
    decoded = STRICT.decode_dict(STRICT.encode_dict(values, version=1))
    assert decoded["schemaVersion"] == 2
    assert decoded["payload"]["errorClass"] == "server_error"
    assert decoded["payload"]["detail"] == values["payload"]["message"]
    assert "message" not in decoded["payload"]


def test_encode_dict_raises_when_version_was_never_shipped() -> None:
    with pytest.raises(InvalidInput, match="no shipped schema for type 'tool.call.failed'"):
        STRICT.encode_dict(sample(CATALOG.by_type["tool.call.failed"]), version=7)


def test_upcast_applies_each_step_in_order_when_value_is_several_versions_old() -> None:
    seen: list[int] = []

    def step(n: int) -> Any:
        def apply(values: dict[str, Any]) -> dict[str, Any]:
            seen.append(values["schemaVersion"])
            return {**values, "trail": [*values["trail"], n]}
        return apply

    steps = {("x.y", 1): step(1), ("x.y", 3): step(3)}
    result = upcast({"schemaVersion": 1, "trail": []}, "x.y", 4, steps)
    assert result == {"schemaVersion": 4, "trail": [1, 3]}
    assert seen == [1, 3]


def test_upcast_leaves_value_alone_when_already_current() -> None:
    values = {"schemaVersion": 2, "payload": {"errorClass": "Weird Class"}}
    assert upcast(dict(values), "tool.call.failed", 2) == values


@pytest.mark.parametrize(("raw", "expected"), [
    ("RateLimited", "rate_limited"), ("HTTP 429", "http_429"), ("timeout", "timeout"),
    ("server-error", "server_error"), ("429", "e_429"), ("", "e_"), ("  Bad__Thing ", "bad_thing"),
])
def test_snake_case_yields_valid_code_when_given_legacy_text(raw: str, expected: str) -> None:
    assert snake_case(raw) == expected

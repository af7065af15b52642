"""What an MCP `tools/call` answer means for runfacts (pure).

- `value_of`: the value a tool result carries: its `structuredContent`; else its text (JSON
  when the one text block is JSON, else `{"text": ...}`); else the content blocks as JSON.
- `lookup_value`: a lookup tool's answer: None (the request never arrived) when it returns no
  content, `null`, or the wrapped `{"result": null}` an SDK server sends for a None return.
- `error_text`: the text of an `isError` result, for the failure's detail.
- `schema_errors`: the arguments checked against a tool's `inputSchema` (JSON Schema), one
  message per bad field, before anything is proposed or sent.
- `meta_of`: the `_meta` a governed call carries (idempotency key, request id, call id).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from jsonschema import Draft202012Validator
from mcp.types import CallToolResult, TextContent

META_PREFIX = "io.runfacts/"
META_IDEMPOTENCY_KEY = "io.runfacts/idempotencyKey"
META_REQUEST_ID = "io.runfacts/externalRequestId"
META_TOOL_CALL_ID = "io.runfacts/toolCallId"
META_ATTEMPT = "io.runfacts/attempt"
META_LEASE_EPOCH = "io.runfacts/leaseEpoch"


def meta_of(idempotency_key: str, external_request_id: str, tool_call_id: str, attempt: int,
            lease_epoch: int) -> dict[str, Any]:
    """The `_meta` of one governed call (a server dedupes on the idempotency key)."""
    return {META_IDEMPOTENCY_KEY: idempotency_key, META_REQUEST_ID: external_request_id,
            META_TOOL_CALL_ID: tool_call_id, META_ATTEMPT: attempt, META_LEASE_EPOCH: lease_epoch}


def value_of(result: CallToolResult) -> Any:
    """The value of a (non-error) result (see the module doc)."""
    if result.structured_content is not None:
        return result.structured_content
    texts = [block.text for block in result.content if isinstance(block, TextContent)]
    if result.content and len(texts) == len(result.content):
        if len(texts) == 1:
            try:
                return json.loads(texts[0])
            except ValueError:
                pass
        return {"text": "\n".join(texts)}
    if not result.content:
        return None
    return {"content": [block.model_dump(mode="json", by_alias=True, exclude_none=True) for block in result.content]}


def lookup_value(result: CallToolResult) -> Any:
    """A lookup's value, None when the request was not found."""
    value = value_of(result)
    if isinstance(value, dict) and set(value) == {"result"}:
        value = value["result"]
    return value


def error_text(result: CallToolResult, limit: int = 300) -> str:
    texts = [block.text for block in result.content if isinstance(block, TextContent)]
    return (" ".join(texts) or "isError without text")[:limit]


def schema_errors(schema: Mapping[str, Any], arguments: Mapping[str, Any]) -> list[str]:
    """'amount_minor: -5 is less than the minimum of 1', ... (empty when they fit)."""
    validator = Draft202012Validator(dict(schema))
    out = []
    for error in sorted(validator.iter_errors(dict(arguments)), key=lambda e: list(e.absolute_path)):
        where = ".".join(str(p) for p in error.absolute_path) or "(arguments)"
        out.append(f"{where}: {error.message}")
    return out

"""The gateway's pure parts: API keys, the token bucket, idempotency records, problem documents
and the OpenAPI document (a valid JSON Schema 2020-12 for every component)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from runfacts.client.errors import BadArgument, CommandRejected, RunNotFound, WaitTimeout
from runfacts.gateway import OPERATIONS, document, load_api_keys, parse_api_keys
from runfacts.gateway.limits import Idempotency, Owner, Owners, Stored, TokenBucket
from runfacts.gateway.problems import from_error
from runfacts.schemas.errors import ConfigError

KEYS = {"a": {"secret": "a-secret-0123456789", "subjectId": "agent-1", "roles": ["agent"], "source": "agent-harness"},
        "b": {"sha256": hashlib.sha256(b"b-secret-0123456789").hexdigest(), "subjectId": "bea",
              "roles": ["support_agent"], "tenant": "acme", "source": "dashboard"}}


def test_a_key_stands_for_its_actor_when_found_by_secret_or_digest() -> None:
    keys = parse_api_keys(json.dumps(KEYS))
    a, b = keys.find("a-secret-0123456789"), keys.find("b-secret-0123456789")
    assert a is not None and a.actor.subjectId == "agent-1" and a.actor.authSource == "agent-harness"
    assert b is not None and (b.actor.tenant, b.actor.roles) == ("acme", ("support_agent",))
    assert keys.find("a-secret-012345678") is None and keys.sources == {"agent-harness", "dashboard"}
    assert "secret" not in repr(a) and a.digest not in repr(a)


@pytest.mark.parametrize(("entry", "field"), [
    ({"secret": "short", "subjectId": "x", "roles": ["agent"], "source": "s"}, "k.secret"),
    ({"secret": "long-enough-secret-1", "roles": ["agent"], "source": "s"}, "k.subjectId"),
    ({"secret": "long-enough-secret-1", "subjectId": "x", "roles": [], "source": "s"}, "k.roles"),
    ({"secret": "long-enough-secret-1", "subjectId": "x", "roles": ["a"]}, "k.source"),
    ({"secret": "long-enough-secret-1", "subjectId": "x", "roles": ["a"], "source": "s", "actor": 1}, "k.actor"),
])
def test_a_bad_key_entry_names_its_field_and_never_the_secret(entry: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_api_keys(json.dumps({"k": entry}))
    assert field in str(caught.value) and "long-enough-secret-1" not in str(caught.value)


def test_token_bucket_passes_a_burst_then_says_how_long_to_wait() -> None:
    bucket = TokenBucket(rate=2.0, burst=3.0)
    assert [bucket.take(0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.take(0.0) == pytest.approx(0.5)
    assert bucket.take(0.5) == 0.0  # one token back after 1/rate seconds


def test_idempotency_replays_the_same_request_and_refuses_another() -> None:
    records = Idempotency(ttl_s=10, capacity=2)
    assert records.begin("k", "i", "fp", 0.0) == ("new", None)
    assert records.begin("k", "i", "fp", 0.1) == ("pending", None)
    assert records.begin("k", "i", "other", 0.1)[0] == "conflict"
    answer = Stored("fp", 201, {"version": 3}, 0.2)
    records.finish("k", "i", answer)
    assert records.begin("k", "i", "fp", 1.0) == ("replay", answer)
    assert records.begin("other-key", "i", "fp", 1.0)[0] == "new"  # keys are per API key
    assert records.begin("k", "i", "fp", 11.0)[0] == "new"  # expired
    records.finish("k", "j", None)
    assert len(records.entries) <= 2  # bounded


def test_problems_keep_reason_codes_and_name_fields() -> None:
    rejected = from_error(CommandRejected("r", "ResumeRun", "self_approval_forbidden"))
    assert (rejected.status, rejected.document["reason"]) == (403, "self_approval_forbidden")
    assert from_error(CommandRejected("r", "ProposeToolCall", "run_ended")).status == 409
    bad = from_error(BadArgument("r", "arguments", 1, "must be a dict"))
    assert (bad.status, bad.document["field"]) == (422, "arguments")
    assert from_error(RunNotFound("r")).status == 404
    assert from_error(WaitTimeout("r", "answer", 1.0)).headers["Retry-After"]


def test_the_openapi_document_is_3_1_and_its_schemas_are_json_schema_2020_12() -> None:
    doc = document()
    assert doc["openapi"] == "3.1.0"
    for schema in doc["components"]["schemas"].values():
        Draft202012Validator.check_schema(schema)  # raises SchemaError naming what is wrong
    refs = {part for part in json.dumps(doc).split('"') if part.startswith("#/components/schemas/")}
    assert {r.rsplit("/", 1)[-1] for r in refs} <= set(doc["components"]["schemas"])
    assert sum(len(p) for p in doc["paths"].values()) == len(OPERATIONS)
    for op in OPERATIONS:
        documented = doc["paths"][op.path][op.method.lower()]
        if op.method == "POST":
            assert any(p["name"] == "Idempotency-Key" and p["required"] for p in documented["parameters"])
            assert "requestBody" in documented


def test_keys_load_from_an_owner_only_file_or_the_environment(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    path.write_text(json.dumps(KEYS))
    path.chmod(0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        load_api_keys({"RUNFACTS_GATEWAY_KEYS_FILE": str(path)})
    path.chmod(0o600)
    assert len(load_api_keys({"RUNFACTS_GATEWAY_KEYS_FILE": str(path)}).keys) == 2
    assert len(load_api_keys({"RUNFACTS_GATEWAY_KEYS": json.dumps(KEYS)}).keys) == 2
    with pytest.raises(ConfigError, match="RUNFACTS_GATEWAY_KEYS_FILE"):
        load_api_keys({})


def test_owners_answer_for_ttl_s_and_keep_at_most_capacity_runs() -> None:
    owners = Owners(ttl_s=30.0, capacity=2)
    owners.remember("r1", Owner("acme", "u1"), now=0.0)
    assert owners.get("r1", now=29.9) == Owner("acme", "u1")
    assert owners.get("r1", now=30.0) is None  # read the run's state again
    owners.remember("r1", Owner("acme", "u1"), now=40.0)
    owners.remember("r2", Owner("acme", "u2"), now=41.0)
    owners.remember("r3", Owner(None, "u3"), now=42.0)
    assert owners.get("r1", now=43.0) is None and owners.get("r3", now=43.0) == Owner(None, "u3")
    assert len(owners.entries) == 2

"""runfacts over HTTP on the real broker: `runfacts gateway serve` (a subprocess) in front of a
real decider (checking every command's source signature), dispatcher and payment simulator.

The refund story through HTTP only; idempotency (same key and body: same answer; another
body: 422; the same runId again: the same run); read-your-writes with min_version; the
approver is the key's subject, never a body field; typed rejections keep their reason codes;
bad input is a 4xx problem document naming the field."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from gateway_support import KEYS, GatewayStack, bearer, gateway_process, gateway_stack, post, sse_events
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from pydantic import BaseModel

from runfacts.gateway import OPERATIONS, Gateway, create_app, document, parse_api_keys
from runfacts.gateway.openapi import Operation

pytestmark = pytest.mark.integration
REFUND = "payments.refund"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayStack]:
    with gateway_stack(kafka_bootstrap, tmp_path_factory.mktemp("gateway")) as running:
        yield running


@pytest.fixture(scope="module")
def http(stack: GatewayStack) -> Iterator[httpx.Client]:
    with gateway_process(stack, RUNFACTS_GATEWAY_RATE_PER_S="1000", RUNFACTS_GATEWAY_BURST="1000") as url, \
            httpx.Client(base_url=url, timeout=60) as client:
        yield client


def start(http: httpx.Client, run_id: str, **extra: Any) -> dict[str, Any]:
    answer = post(http, "/runs", {"runId": run_id, "goal": f"ticket:{run_id}", "summary": "Refund a kettle",
                                  "userId": "customer-42", "tenant": "acme", **extra})
    assert answer.status_code in (200, 201), answer.text
    return answer.json()  # type: ignore[no-any-return]


def events_until(http: httpx.Client, run_id: str, wanted: str, key: str = "agent",
                 timeout: float = 90) -> list[tuple[str, str, dict[str, Any]]]:
    """The run's SSE events up to the first `wanted` one."""
    seen: list[tuple[str, str, dict[str, Any]]] = []
    deadline = time.monotonic() + timeout
    with http.stream("GET", f"/runs/{run_id}/events", headers=bearer(key), timeout=timeout) as answer:
        assert answer.status_code == 200, answer.read()
        lines = answer.iter_lines()
        while time.monotonic() < deadline:
            [event] = sse_events(lines, 1)
            seen.append(event)
            if event[1] == wanted:
                return seen
    raise AssertionError(f"no {wanted} for {run_id}: {[e[1] for e in seen]}")


def test_refund_story_over_http_with_a_person_approving(http: httpx.Client) -> None:
    run_id = f"gw-{uuid.uuid4().hex[:8]}"
    started = start(http, run_id)
    assert started["created"] is True and started["version"] >= 1
    reasoned = post(http, f"/runs/{run_id}/reasoning", {"conclusion": "damaged on arrival",
                                                        "evidence": ["order:o-1"]})
    assert reasoned.status_code == 200, reasoned.text
    assert reasoned.json()["version"] > started["version"]
    assert reasoned.headers["Runfacts-Version"] == str(reasoned.json()["version"])
    state = http.get(f"/runs/{run_id}/state", params={"min_version": reasoned.json()["version"]},
                     headers=bearer("agent"))
    assert state.status_code == 200 and state.json()["version"] >= reasoned.json()["version"]
    proposed = post(http, f"/runs/{run_id}/calls", {"capability": REFUND, "target": "o-1", "arguments": {
        "orderId": "o-1", "amountMinor": 4200, "currency": "EUR"}, "reasoningId": reasoned.json()["reasoningId"]})
    assert proposed.status_code == 200, proposed.text
    approval_id = proposed.json()["approvalId"]
    assert approval_id is not None
    listed = http.get("/approvals", params={"role": "support_agent"}, headers=bearer("alice"))
    assert listed.status_code == 200, listed.text
    [item] = [a for a in listed.json()["approvals"] if a["runId"] == run_id]
    assert (item["approvalId"], item["asks"]) == (approval_id, "refund on o-1 (high risk)")
    assert item["requesters"] == ["customer-42"] and item["displayDigest"]  # who asked; what a decision binds
    assert any(line.startswith("amountMinor") and "4200" in line for line in item["arguments"]), item["arguments"]
    decided = post(http, f"/runs/{run_id}/approvals/{approval_id}/decision", {"decision": "approve"}, key="alice")
    assert decided.status_code == 200, decided.text
    assert decided.json()["approver"] == "alice" and decided.json()["version"] > proposed.json()["version"]
    seen = events_until(http, run_id, "tool.call.completed")
    [granted] = [data for _, kind, data in seen if kind == "approval.granted"]
    assert granted["payload"]["actor"] == {"subjectId": "alice", "roles": ["support_agent"], "tenant": "acme",
                                           "authSource": "dashboard"}
    [created] = [data for _, kind, data in seen if kind == "run.created"]
    assert created["payload"]["actor"]["subjectId"] == "refund-agent"  # the key's subject (agent-harness)
    ids = [event_id for event_id, _, _ in seen]
    assert len(set(ids)) == len(ids) and all(":" in i for i in ids)


def test_the_body_cannot_choose_the_approver_and_the_requester_cannot_approve(http: httpx.Client) -> None:
    run_id = f"gw-{uuid.uuid4().hex[:8]}"
    start(http, run_id)
    proposed = post(http, f"/runs/{run_id}/calls", {"capability": REFUND, "target": "o-2", "arguments": {
        "orderId": "o-2", "amountMinor": 100, "currency": "EUR"}})
    approval_id = proposed.json()["approvalId"]
    path = f"/runs/{run_id}/approvals/{approval_id}/decision"
    forged = post(http, path, {"decision": "approve", "approver": "bob"}, key="alice")
    assert forged.status_code == 422 and forged.headers["content-type"] == "application/problem+json"
    assert forged.json()["field"] == "approver" and "authenticated key" in forged.json()["fix"]
    own = post(http, path, {"decision": "approve"}, key="requester")  # who asked for it may not approve it
    assert own.status_code == 403, own.text
    assert own.json()["reason"] == "self_approval_forbidden"
    elsewhere = post(http, path, {"decision": "approve"}, key="other-tenant")
    assert elsewhere.status_code == 404 and elsewhere.json()["field"] == "runId"  # another tenant's run: unseen
    rejected = post(http, path, {"decision": "reject"}, key="alice")
    assert rejected.status_code == 200 and rejected.json()["approver"] == "alice"
    again = post(http, path, {"decision": "approve"}, key="alice")
    assert again.status_code == 409 and again.json()["type"].endswith("approval-not-open")


def test_idempotency_key_replays_the_answer_and_refuses_another_body(http: httpx.Client) -> None:
    run_id = f"gw-{uuid.uuid4().hex[:8]}"
    body = {"runId": run_id, "goal": "ticket:T-7", "summary": "s", "userId": "customer-42", "tenant": "acme"}
    first = post(http, "/runs", body, idem="key-1-" + run_id)
    replay = post(http, "/runs", body, idem="key-1-" + run_id)
    assert first.status_code == replay.status_code == 201
    assert first.json() == replay.json() and replay.headers["Idempotent-Replayed"] == "true"
    other = post(http, "/runs", {**body, "summary": "another"}, idem="key-1-" + run_id)
    assert other.status_code == 422 and other.json()["field"] == "Idempotency-Key"
    same_run = post(http, "/runs", body)  # a new key, the same runId: the same run
    assert same_run.status_code == 200 and same_run.json()["created"] is False
    assert same_run.json()["version"] >= first.json()["version"]
    stopped = post(http, f"/runs/{run_id}/stop", {"reason": "done"}, key="alice")
    assert stopped.status_code == 200, stopped.text
    assert stopped.json()["version"] > first.json()["version"]
    cancelled = post(http, f"/runs/{run_id}/cancel", {}, key="alice")
    assert cancelled.status_code in (200, 409), cancelled.text
    if cancelled.status_code == 409:
        assert cancelled.json()["reason"]  # a typed rejection keeps its reason code


def test_bad_input_is_a_4xx_problem_naming_what_to_fix(http: httpx.Client, stack: GatewayStack) -> None:
    def problem(answer: httpx.Response, status: int, field: str) -> dict[str, Any]:
        assert answer.status_code == status, answer.text
        assert answer.headers["content-type"] == "application/problem+json"
        doc = answer.json()
        assert doc["status"] == status and doc["field"] == field and doc["detail"] and doc["fix"]
        return doc  # type: ignore[no-any-return]

    problem(http.post("/runs", json={}), 401, "Authorization")
    problem(http.post("/runs", json={}, headers={"Authorization": "Bearer nope-nope-nope-nope"}), 401,
            "Authorization")
    problem(http.post("/runs", json={}, headers=bearer("agent")), 428, "Idempotency-Key")
    problem(post(http, "/runs", {"goal": "x"}), 422, "summary")
    problem(post(http, "/runs", {"goal": "x", "summary": "s", "userId": "u", "budget": {"gold": 1}}), 422,
            "budget.gold")
    problem(http.post("/runs", content=b"{not json", headers={**bearer("agent"), "Idempotency-Key": "k",
                                                             "Content-Type": "application/json"}), 400, "(body)")
    problem(http.post("/runs", content=b"x=1", headers={**bearer("agent"), "Idempotency-Key": "k2",
                                                       "Content-Type": "application/x-www-form-urlencoded"}),
            415, "Content-Type")
    problem(post(http, "/runs", {"summary": "x" * 70_000}), 413, "(body)")
    problem(http.get("/runs/no-such-run/state", headers=bearer("agent")), 404, "runId")
    problem(http.get("/nowhere", headers=bearer("agent")), 404, "(path)")
    problem(http.delete("/runs", headers=bearer("agent")), 405, "(path)")
    problem(http.get("/runs/x/state", params={"min_version": "-1"}, headers=bearer("agent")), 400, "min_version")
    problem(http.get("/runs/abc%0A/state", headers=bearer("agent")), 400, "run_id")  # a newline is not an id
    run_id = f"gw-{uuid.uuid4().hex[:8]}"
    version = start(http, run_id)["version"]
    late = http.get(f"/runs/{run_id}/state", params={"min_version": version + 1000, "wait": "0.5"},
                    headers=bearer("agent"))
    assert problem(late, 412, "min_version")["version"] >= version
    problem(http.get(f"/runs/{run_id}/events", headers={**bearer("agent"), "Last-Event-ID": "oops"}), 400,
            "Last-Event-ID")
    unknown = post(http, f"/runs/{run_id}/calls", {"capability": "payments.nothing", "target": "o",
                                                    "arguments": {}})
    assert unknown.status_code in (403, 409) and unknown.json()["reason"], unknown.text  # the decider's code
    forbidden = post(http, f"/runs/{run_id}/calls", {"capability": REFUND, "target": "o", "arguments": {}},
                     key="alice")  # a support agent may not propose: the decider's access policy says so
    assert forbidden.status_code == 403 and forbidden.json()["reason"] == "forbidden_role", forbidden.text


def operation_requests(http: httpx.Client) -> list[tuple[Operation, str, dict[str, str], dict[str, Any] | None]]:
    """One request per documented operation, on a real run with a pending approval."""
    run_id = f"gw-{uuid.uuid4().hex[:8]}"
    start(http, run_id)
    proposed = post(http, f"/runs/{run_id}/calls", {"capability": REFUND, "target": "o-9", "arguments": {
        "orderId": "o-9", "amountMinor": 10, "currency": "EUR"}})
    values = {"run_id": run_id, "approval_id": proposed.json()["approvalId"]}
    bodies: dict[str, dict[str, Any]] = {
        "startRun": {"goal": "ticket:T-2", "summary": "s", "userId": "u-2"}, "recordReasoning": {"conclusion": "c"},
        "decideApproval": {"decision": "reject"}, "stopRun": {}, "cancelRun": {},
        "writeOutput": {"seq": 0, "text": "t"},
        "proposeCall": {"capability": REFUND, "target": "o-10", "arguments": {  # o-9's approval stays open
            "orderId": "o-10", "amountMinor": 10, "currency": "EUR"}}}  # arguments that fit the refund's schema
    out = []
    for op in OPERATIONS:
        ending = op.id in ("stopRun", "cancelRun")  # each on a run of its own, so every answer is a 2xx
        if ending:
            values = {**values, "run_id": f"gw-{uuid.uuid4().hex[:8]}"}
            start(http, values["run_id"])
        path = op.path.format(**values)
        key = "alice" if op.id in ("decideApproval", "listApprovals") or ending else "agent"
        headers = {**bearer(key), "Idempotency-Key": uuid.uuid4().hex} if op.method == "POST" else bearer(key)
        out.append((op, path, headers, bodies.get(op.id)))
        values["run_id"] = run_id
    return out


def test_the_openapi_document_matches_the_running_gateway(http: httpx.Client) -> None:
    doc = http.get("/openapi.json").json()
    assert doc == json.loads(json.dumps(document())) and doc["openapi"] == "3.1.0"
    app = create_app(Gateway(parse_api_keys(json.dumps(KEYS)), service=None))  # type: ignore[arg-type]
    served = {(route.path, method) for route in app.routes for method in getattr(route, "methods", ())
              if method != "HEAD" and route.path != "/openapi.json"}
    assert served == {(path, method.upper()) for path, ops in doc["paths"].items() for method in ops}
    for op, path, headers, body in operation_requests(http):  # every documented route answers as documented
        if op.stream:
            headers = {**headers, "Accept": "text/event-stream"}
            with http.stream(op.method, path, headers=headers, timeout=httpx.Timeout(30, read=10)) as answer:
                assert answer.status_code == op.status, (op.id, answer.read())
                assert answer.headers["content-type"].startswith("text/event-stream")
                assert "text/event-stream" in doc["paths"][op.path]["get"]["responses"]["200"]["content"]
            continue
        answer = http.request(op.method, path, json=body, headers=headers)
        documented = doc["paths"][op.path][op.method.lower()]["responses"]
        assert str(answer.status_code) in documented, (op.id, answer.status_code, answer.text)
        media = answer.headers["content-type"].split(";")[0]
        schema = documented[str(answer.status_code)]["content"][media]["schema"]
        Draft202012Validator({**schema, "components": doc["components"]}).validate(answer.json())
        assert answer.status_code < 300, (op.id, answer.text)


SCALARS = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
           | st.text(max_size=30))
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner,
                                                                                          max_size=4), max_leaves=12)
PLAUSIBLE: dict[str, list[Any]] = {
    "runId": ["r-1", "", "a b", "x" * 300], "goal": ["ticket:T-1", "has space"], "summary": ["s", ""],
    "userId": ["u-1", "customer-42"], "tenant": ["acme", "globex", None], "budget": [{"tokens": 5}, {"tokens": -1}],
    "conclusion": ["why", ""], "evidence": [["order:o-1"], ["a b"]], "reasoningId": ["reasoning-1", "??"],
    "capability": [REFUND, "nope.nothing"], "arguments": [{"orderId": "o", "amountMinor": 1, "currency": "EUR"}],
    "target": ["o-1"], "risk": ["low", "extreme"], "decision": ["approve", "reject", "maybe"],
    "reason": ["done", ""], "approver": ["bob"], "toolCallId": ["call-1"], "businessKey": ["ticket:T-1"],
    "stream": ["answer", "a b"], "seq": [0, 7, -1, 2**40], "text": ["tok", "x" * 40_000], "done": [True, "yes"],
    "status": ["done", "failed", "maybe"],
}


def bodies(model: type[BaseModel], valid: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Any JSON; the model's fields (and `approver`) with any or plausible values; and a valid
    body with one field changed, so that valid and nearly valid bodies reach the decider too."""
    names = [*model.model_fields, "approver"]
    value = {n: st.one_of(JSON, st.sampled_from(PLAUSIBLE.get(n, [None]))) for n in names}
    one_changed = st.sampled_from(names).flatmap(lambda n: value[n].map(lambda v: {**valid, n: v}))
    return st.one_of(JSON, st.fixed_dictionaries({}, optional=value), one_changed, st.just(valid))


@pytest.mark.parametrize("op_id", [op.id for op in OPERATIONS if op.method == "POST"])
def test_fuzzed_bodies_never_get_a_5xx(http: httpx.Client, op_id: str) -> None:
    op, path, headers, valid = next(r for r in operation_requests(http) if r[0].id == op_id)
    assert op.body is not None and valid is not None
    statuses: set[int] = set()

    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(body=bodies(op.body, valid), raw=st.one_of(st.none(), st.binary(max_size=40)))
    def fuzz(body: Any, raw: bytes | None) -> None:
        sent = {**headers, "Idempotency-Key": uuid.uuid4().hex}
        answer = (http.post(path, json=body, headers=sent) if raw is None
                  else http.post(path, content=raw, headers={**sent, "Content-Type": "application/json"}))
        statuses.add(answer.status_code)
        assert answer.status_code < 500, (body, raw, answer.text)
        if answer.status_code >= 400:
            assert answer.headers["content-type"] == "application/problem+json" and answer.json()["detail"]

    fuzz()
    assert any(s < 300 for s in statuses), statuses  # some bodies were valid
    assert any(400 <= s < 500 for s in statuses), statuses


def test_docs_http_md_curl_blocks_run_in_order_against_the_gateway(http: httpx.Client, tmp_path: Path) -> None:
    blocks = re.findall(r"```bash\n(.*?)```", (REPO / "docs" / "http.md").read_text(), flags=re.S)
    assert len(blocks) >= 6
    script = "set -eu\n" + "\n".join(blocks)
    env = {**os.environ, "GW": str(http.base_url).rstrip("/"), "AGENT_KEY": KEYS["agent"]["secret"],
           "ALICE_KEY": KEYS["alice"]["secret"]}
    done = subprocess.run(["bash", "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    out = done.stdout
    assert '"created":true' in out and "waiting for approval-" in out
    assert '"refund on order-001 (high risk)"' in out
    assert '"status": "running"' in out
    assert '"field": "approver"' in out and '"status": 422' in out
    ids = [line[4:] for line in (tmp_path / "events.txt").read_text().splitlines() if line.startswith("id: ")]
    assert f"id: {ids[2]}" in out  # resumed right after the second id: the third comes first
    assert "event: tool.call.completed" in (tmp_path / "events.txt").read_text()
    output = [line.split("\t") for line in (tmp_path / "output.tsv").read_text().splitlines()]
    assert output == [["0", "part 0 ", "false"], ["1", "part 1 ", "false"], ["2", "part 2 ", "false"],
                      ["3", "part 3 ", "false"], ["4", "", "true"]]  # the retry's seq 0-2 skipped: each once


def test_a_retry_at_another_gateway_instance_gets_the_first_answer_and_applies_once(
        stack: GatewayStack, http: httpx.Client) -> None:
    run_id = f"gw-{uuid.uuid4().hex[:8]}"
    start(http, run_id)
    first = post(http, f"/runs/{run_id}/reasoning", {"conclusion": "once"}, idem=f"retry-{run_id}")
    assert first.status_code == 200, first.text
    with gateway_process(stack, RUNFACTS_GATEWAY_ANSWER_TIMEOUT_S="10") as other, \
            httpx.Client(base_url=other, timeout=60) as elsewhere:  # no record of the key there
        again = post(elsewhere, f"/runs/{run_id}/reasoning", {"conclusion": "once"}, idem=f"retry-{run_id}")
        assert again.status_code == 200, again.text
        assert again.json() == first.json()  # read from the run's facts: the decider dropped the duplicate
        state = elsewhere.get(f"/runs/{run_id}/state", headers=bearer("agent")).json()
    assert state["version"] == first.json()["version"]  # applied once


def test_arguments_that_break_the_tools_schema_are_a_422_naming_the_field_and_reach_no_approver(
        http: httpx.Client) -> None:
    run_id = f"gw-{uuid.uuid4().hex[:8]}"
    start(http, run_id)
    bad = post(http, f"/runs/{run_id}/calls", {"capability": REFUND, "target": "o-3", "arguments": {
        "orderId": "o-3", "amountMinor": -5, "currency": "EUR"}})
    assert bad.status_code == 422 and bad.headers["content-type"] == "application/problem+json", bad.text
    problem = bad.json()
    assert problem["reason"] == "invalid_arguments" and problem["field"] == "arguments"
    assert "amountMinor" in problem["detail"]
    listed = http.get("/approvals", params={"role": "support_agent"}, headers=bearer("alice")).json()["approvals"]
    assert [a for a in listed if a["runId"] == run_id] == []  # nobody is asked

// A call's decision and result from a run's facts (pure): the same reading as runfacts.client.outcomes.
import assert from "node:assert/strict";
import { test } from "node:test";
import { ApprovalExpiredError, CallOutcome, RunCancelledError, ToolFailedError, type Resolved,
         type RunEvent } from "@runfacts/client";

const fact = (eventType: string, payload: Record<string, unknown> = {}): RunEvent =>
  ({ eventId: `e-${Math.random()}`, eventType, runId: "r-1", payload });

test("approved, then completed: the decision names the approver, the result is the decoded value", () => {
  const o = new CallOutcome("r-1", "c-1");
  for (const e of [fact("tool.call.proposed", { toolCallId: "c-1" }), fact("approval.required", { toolCallId: "c-1", approvalId: "a-1" }),
                   fact("tool.call.completed", { toolCallId: "other", result: "1" }),
                   fact("approval.granted", { toolCallId: "c-1", actor: { subjectId: "alice" } }),
                   fact("tool.call.authorized", { toolCallId: "c-1", approvalId: "a-1" })]) o.add(e);
  assert.deepEqual(o.decision, { value: { toolCallId: "c-1", approvalId: "a-1", approver: "alice" } });
  assert.equal(o.result, undefined, "another call's completion is not this one's");
  o.add(fact("tool.call.completed", { toolCallId: "c-1", result: '{"refundId":"re_1"}' }));
  assert.deepEqual(o.result, { value: { refundId: "re_1" } });
});

test("a lost answer reconciled as completed is a result; found_failed and refusals are typed errors", () => {
  const found = new CallOutcome("r-1", "c-1");
  found.add(fact("tool.call.result_unknown", { toolCallId: "c-1" }));
  found.add(fact("tool.call.reconciled", { toolCallId: "c-1", outcome: "not_found" }));
  assert.equal(found.result, undefined, "not_found: dispatched again");
  found.add(fact("tool.call.reconciled", { toolCallId: "c-1", outcome: "found_completed", result: "42" }));
  assert.deepEqual(found.result, { value: 42 });

  const failed = new CallOutcome("r-1", "c-1");
  failed.add(fact("tool.call.reconciled", { toolCallId: "c-1", outcome: "found_failed" }));
  assert.ok(failed.result && "error" in failed.result && failed.result.error instanceof ToolFailedError);

  const expired = new CallOutcome("r-1", "c-1");
  expired.add(fact("approval.expired", { toolCallId: "c-1", expiresAt: "2026-12-06T00:00:00Z" }));
  assert.ok(expired.decision && "error" in expired.decision && expired.decision.error instanceof ApprovalExpiredError);

  const cancelled = new CallOutcome("r-1", "c-1");
  cancelled.add(fact("run.cancelled"));
  assert.equal(cancelled.result, undefined, "a run ending before the call was proposed is not its outcome");
  cancelled.add(fact("tool.call.proposed", { toolCallId: "c-1" }));
  cancelled.add(fact("run.cancelled"));
  const ended = cancelled.result as Resolved<unknown> | undefined; // (the assertion above narrowed it)
  assert.ok(ended && "error" in ended && ended.error instanceof RunCancelledError);
});

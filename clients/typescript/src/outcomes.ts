// What a run's facts say about one tool call, pure (the same reading as runfacts.client.outcomes):
// its decision (authorized, by policy or by an approver) and its result (the value, or why it
// will not come).
import {
  ApprovalExpiredError, ApprovalInvalidatedError, ApprovalRejectedError, CallError, RunCancelledError,
  RunEndedError, RunNeedsReviewError, ToolFailedError,
} from "./errors.js";
import type { RunEvent } from "./types.js";

const RUN_ENDINGS = new Set(["run.needs_review", "run.cancel_requested", "run.cancelled", "run.completed", "run.failed"]);

export type Resolved<T> = { value: T } | { error: CallError };

/** How a call was authorized: `approvalId` and `approver` are null when the policy allowed it. */
export interface CallDecision {
  toolCallId: string;
  approvalId: string | null;
  approver: string | null;
}

/** The value a completion fact carries: its `result` (JSON text) decoded, or as given. */
export function resultValue(payload: Record<string, any>): unknown {
  const raw = payload["result"];
  if (typeof raw !== "string") return raw ?? null;
  try {
    return JSON.parse(raw);
  } catch {
    return raw; // a marker ([erased], [encrypted], ...)
  }
}

/** Folds a run's facts, in log order, into a call's decision and result. */
export class CallOutcome {
  private proposed = false;
  private approver: string | null = null;
  decision: Resolved<CallDecision> | undefined;
  result: Resolved<unknown> | undefined;

  constructor(readonly runId: string, readonly toolCallId: string) {}

  add(event: RunEvent): void {
    const p = event.payload ?? {};
    const ofCall = p["toolCallId"] === this.toolCallId;
    if (ofCall) this.proposed = true;
    else if (!(this.proposed && p["toolCallId"] == null && RUN_ENDINGS.has(event.eventType))) return;
    switch (event.eventType) {
      case "approval.granted":
        this.approver = p["actor"]?.subjectId ?? null;
        return;
      case "tool.call.authorized":
        this.decision ??= { value: { toolCallId: this.toolCallId, approvalId: p["approvalId"] ?? null,
                                     approver: this.approver } };
        return;
      case "tool.call.completed":
        this.result ??= { value: resultValue(p) };
        return;
      case "tool.call.reconciled":
        if (p["outcome"] === "found_completed") this.result ??= { value: resultValue(p) };
        else if (p["outcome"] === "found_failed") {
          this.result ??= { error: new ToolFailedError(this.runId, this.toolCallId, event,
                                                       "reconciliation found the call failed") };
        }
        return; // not_found: dispatched again; still_unknown: looked up again
    }
    const refused = this.refusal(event);
    if (refused === undefined) return;
    this.result ??= { error: refused };
    if (event.eventType !== "tool.call.failed" && event.eventType !== "run.completed") this.decision ??= { error: refused };
  }

  private refusal(event: RunEvent): CallError | undefined {
    const p = event.payload;
    const [run, call] = [this.runId, this.toolCallId];
    switch (event.eventType) {
      case "approval.rejected":
        return new ApprovalRejectedError(run, call, event, `approval rejected by ${p["actor"]?.subjectId ?? "?"}`);
      case "approval.expired":
        return new ApprovalExpiredError(run, call, event, `approval expired at ${p["expiresAt"]}`);
      case "approval.invalidated":
        return p["reason"] === "run_cancelled"
          ? new RunCancelledError(run, call, event, "the run was cancelled")
          : new ApprovalInvalidatedError(run, call, event, `approval invalidated: ${p["reason"]} ${p["detail"] ?? ""}`.trim());
      case "tool.call.failed":
        return new ToolFailedError(run, call, event, `the tool failed (${p["errorClass"]}): ${p["detail"] ?? ""}`.trim());
      case "run.needs_review":
        return new RunNeedsReviewError(run, call, event, `the run needs review: ${p["reason"]}`);
      case "run.cancel_requested":
      case "run.cancelled":
        return new RunCancelledError(run, call, event, "the run was cancelled");
      case "run.completed":
      case "run.failed":
        return new RunEndedError(run, call, event, `the run ${event.eventType.slice(4)}`);
    }
    return undefined;
  }
}

// Errors as typed classes. A gateway error is a ProblemError carrying the RFC 9457 problem
// document the gateway answered (its `type`, `field`, `fix` and, for a decider's refusal, its
// `reason` code); one subclass per status. What a tool call's facts say (rejected, expired,
// failed, ...) are CallError subclasses carrying the fact.
import type { Problem, RunEvent } from "./types.js";

export class RunfactsError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** The gateway answered a problem document (`application/problem+json`). */
export class ProblemError extends RunfactsError {
  readonly status: number;
  readonly problem: Problem;
  /** Seconds the gateway asked to wait before retrying (429, 503, 409 in flight), if it said. */
  readonly retryAfterS: number | undefined;

  constructor(problem: Problem, retryAfterS?: number) {
    const parts = [`${problem.status} ${problem.title}: ${problem.detail}`];
    if (problem.field) parts.push(`field: ${problem.field}`);
    if (problem.reason) parts.push(`reason: ${problem.reason}`);
    if (problem.fix) parts.push(`fix: ${problem.fix}`);
    super(parts.join("; "));
    this.status = problem.status;
    this.problem = problem;
    this.retryAfterS = retryAfterS;
  }

  /** The kind of problem: the last part of its `type` (`urn:runfacts:problem:<kind>`). */
  get kind(): string {
    return this.problem.type.split(":").pop() ?? this.problem.type;
  }
  /** The decider's reason code, for a command it refused (`forbidden_role`, `run_ended`, ...). */
  get reason(): string | undefined {
    return this.problem.reason ?? undefined;
  }
  get field(): string | undefined {
    return this.problem.field ?? undefined;
  }
  get fix(): string | undefined {
    return this.problem.fix ?? undefined;
  }
}

/** 400: not JSON, a bad path id, a bad query parameter or Last-Event-ID. */
export class BadRequestError extends ProblemError {}
/** 401: no or an unknown API key. */
export class UnauthenticatedError extends ProblemError {}
/** 403: the decider's denial (`reason`), or a role the key does not hold. */
export class ForbiddenError extends ProblemError {}
/** 404: no such run (or not one this key may read), approval or route. */
export class NotFoundError extends ProblemError {}
/** 406: the stream is not offered for this key's view. */
export class NotAcceptableError extends ProblemError {}
/** 409: the decider's refusal for the run's state (`reason`), or an Idempotency-Key still in flight. */
export class ConflictError extends ProblemError {}
/** 412: `minVersion` not reached within the wait; `version` is where the run is. */
export class VersionNotReachedError extends ProblemError {
  get version(): number | undefined {
    const found = (this.problem as Record<string, unknown>)["version"];
    return typeof found === "number" ? found : undefined;
  }
}
/** 413: the body is over the gateway's cap. */
export class PayloadTooLargeError extends ProblemError {}
/** 415: the body is not JSON. */
export class UnsupportedMediaTypeError extends ProblemError {}
/** 422: the body does not validate (`problem.errors` lists each), the arguments break the tool's schema, or an Idempotency-Key was reused with another body. */
export class InvalidRequestError extends ProblemError {}
/** 428: a POST without an Idempotency-Key. */
export class IdempotencyKeyRequiredError extends ProblemError {}
/** 429: over the key's rate; `retryAfterS`. */
export class RateLimitedError extends ProblemError {}
/** 503: the broker, or the decider's answer, did not come in time; retry with the same Idempotency-Key. */
export class UnavailableError extends ProblemError {}

const BY_STATUS: Record<number, new (problem: Problem, retryAfterS?: number) => ProblemError> = {
  400: BadRequestError, 401: UnauthenticatedError, 403: ForbiddenError, 404: NotFoundError, 406: NotAcceptableError,
  409: ConflictError, 412: VersionNotReachedError, 413: PayloadTooLargeError, 415: UnsupportedMediaTypeError,
  422: InvalidRequestError, 428: IdempotencyKeyRequiredError, 429: RateLimitedError, 503: UnavailableError,
};

/** The typed error of a problem document. */
export function problemError(problem: Problem, retryAfterS?: number): ProblemError {
  const Kind = BY_STATUS[problem.status] ?? ProblemError;
  return new Kind(problem, retryAfterS);
}

/** The gateway could not be reached (a network error), after the client's retries. */
export class ConnectionError extends RunfactsError {}

/** A tool call that will not give a result, as the run's facts say; `event` is the fact. */
export class CallError extends RunfactsError {
  constructor(readonly runId: string, readonly toolCallId: string, readonly event: RunEvent, message: string) {
    super(`run ${runId}, call ${toolCallId}: ${message}`);
  }
}
export class ApprovalRejectedError extends CallError {
  get approver(): string | undefined {
    return this.event.payload["actor"]?.subjectId;
  }
}
export class ApprovalExpiredError extends CallError {}
export class ApprovalInvalidatedError extends CallError {
  get reason(): string {
    return String(this.event.payload["reason"]);
  }
}
export class ToolFailedError extends CallError {
  get errorClass(): string {
    return String(this.event.payload["errorClass"] ?? this.event.payload["outcome"]);
  }
  get retryable(): boolean {
    return Boolean(this.event.payload["retryable"]);
  }
}
export class RunNeedsReviewError extends CallError {
  get reason(): string {
    return String(this.event.payload["reason"]);
  }
}
export class RunCancelledError extends CallError {}
export class RunEndedError extends CallError {}

/** A wait (for a result, a decision) that ran out of time, or was aborted. */
export class WaitTimeoutError extends RunfactsError {}

// The gateway's contract, named: every request and answer type below is generated from the
// gateway's OpenAPI document (src/generated/openapi.ts), never written by hand. Only the
// streamed facts' envelope is declared here: the OpenAPI document types an SSE body as text.
import type { components, operations } from "./generated/openapi.js";

type Schemas = components["schemas"];

export type StartRun = Schemas["StartRun"];
export type StartAnswer = Schemas["StartAnswer"];
export type RecordReasoning = Schemas["RecordReasoning"];
export type ReasoningAnswer = Schemas["ReasoningAnswer"];
export type ProposeCall = Schemas["ProposeCall"];
export type ProposeAnswer = Schemas["ProposeAnswer"];
export type DecideApproval = Schemas["DecideApproval"];
export type Decision = DecideApproval["decision"];
export type DecisionAnswer = Schemas["DecisionAnswer"];
export type EndRun = Schemas["EndRun"];
export type Answer = Schemas["Answer"];
export type ApprovalItem = Schemas["ApprovalItem"];
export type ApprovalList = Schemas["ApprovalList"];
export type RunState = Schemas["RunState"];
export type RunView = Schemas["RunView"];
export type Problem = Schemas["Problem"];
export type WriteOutput = Schemas["WriteOutput"];
export type OutputAnswer = Schemas["OutputAnswer"];
/** One chunk of a run's partial output (`data:` of an `output` event of `GET /runs/{id}/output`). */
export type OutputChunk = Schemas["OutputChunk"];

export type ListApprovalsQuery = NonNullable<operations["listApprovals"]["parameters"]["query"]>;
export type ReadQuery = NonNullable<operations["getRunState"]["parameters"]["query"]>;

/** One fact of a run as the events stream carries it (`data:` of `GET /runs/{id}/events`). */
export interface RunEvent {
  eventId: string;
  eventType: string;
  runId: string;
  causationId?: string | null;
  correlationId?: string | null;
  occurredAt?: string;
  capabilityId?: string | null;
  payload: Record<string, any>;
  [field: string]: unknown;
}

/** A Server-Sent Event of a run's stream: `id` is its Kafka position `<partition>:<offset>`. */
export interface StreamEvent<T> {
  id: string;
  event: string;
  data: T;
}

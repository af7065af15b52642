export { OutputWriter, Runfacts } from "./client.js";
export type { OutputOptions, ReadOptions, RunfactsOptions, StreamOptions, WaitOptions, WriteOptions } from "./client.js";
export * from "./errors.js";
export { CallOutcome, resultValue } from "./outcomes.js";
export type { CallDecision, Resolved } from "./outcomes.js";
export { sseFrames } from "./sse.js";
export type { SseFrame } from "./sse.js";
export type * from "./types.js";
export type { components, operations, paths } from "./generated/openapi.js";

// The client of the runfacts HTTP gateway (docs/http.md): every write is a command the run
// decider validates, sent with an Idempotency-Key (one per intended change, reused on every
// retry); reads wait for a version a write answered; a run's facts and view stream as
// Server-Sent Events that resume after the last id received (no gap, no duplicate).
import { ConnectionError, ProblemError, WaitTimeoutError, problemError } from "./errors.js";
import { CallOutcome, type CallDecision } from "./outcomes.js";
import { after, sseFrames } from "./sse.js";
import type {
  Answer, ApprovalItem, ApprovalList, Decision, DecisionAnswer, Problem, ProposeAnswer, ProposeCall,
  OutputAnswer, OutputChunk, ReasoningAnswer, RecordReasoning, RunEvent, RunState, RunView, StartAnswer, StartRun,
  StreamEvent, WriteOutput,
} from "./types.js";

export interface RunfactsOptions {
  /** The gateway's base URL, e.g. `http://127.0.0.1:8090`. */
  url: string;
  /** An API key of the gateway's key file: who the client acts as. */
  apiKey: string;
  /** Attempts after the first for a request that could not reach the gateway or got 429/503 (default 4). */
  retries?: number;
  /** A fetch of your own (default: the global one). */
  fetch?: typeof fetch;
}

export interface WriteOptions {
  /** One per intended change; the same on a retry answers the same. Default: a fresh UUID (reused on this call's retries). */
  idempotencyKey?: string;
  signal?: AbortSignal;
}

export interface ReadOptions {
  /** Wait until the run is at least at this version (a write's answer): read-your-writes. */
  minVersion?: number;
  /** How long the gateway waits for `minVersion`, seconds (default 10, at most 30). */
  waitS?: number;
  signal?: AbortSignal;
}

export interface StreamOptions {
  /** Resume right after this event id (`<partition>:<offset>`), e.g. the last one a previous reader saw. */
  lastEventId?: string;
  /** Reconnect when the connection drops or the gateway ends the stream (default true). */
  reconnect?: boolean;
  /** Consecutive failed connection attempts before giving up (default 10). */
  maxFailures?: number;
  signal?: AbortSignal;
  /** Called when a connection ended and the stream reconnects after `lastEventId`. */
  onReconnect?: (lastEventId: string | undefined, cause: unknown) => void;
}

export interface WaitOptions {
  /** Give up after this long (a WaitTimeoutError). Default: no limit but `signal`. */
  timeoutMs?: number;
  signal?: AbortSignal;
  /** Every fact of the run the wait reads (the call's progress, for a UI). */
  onEvent?: (event: StreamEvent<RunEvent>) => void;
}

export interface OutputOptions {
  /** Which output of the run (default "answer"), e.g. a step's id. */
  stream?: string;
  /** The seq of the first chunk (default 0). A writer retried after a crash may start over from 0:
   * readers skip every chunk whose seq they already had. */
  start?: number;
}

/** Writes one output stream of a run, chunk after chunk (`Runfacts.output`). */
export class OutputWriter {
  /** The seq the next chunk gets. */
  seq: number;
  closed = false;
  private chain: Promise<unknown> = Promise.resolve();

  constructor(private readonly client: Runfacts, readonly runId: string, readonly stream: string, start = 0) {
    this.seq = start;
  }

  /** Send one chunk; chunks go in order (each after the one before was answered). */
  write(text: string, options?: WriteOptions): Promise<OutputAnswer> {
    if (this.closed) return Promise.reject(new TypeError(`output stream ${this.stream} of run ${this.runId} is closed`));
    return this.send({ stream: this.stream, seq: this.seq++, text }, options);
  }

  /** The stream's last chunk (`done`, with `status`): a reader that never sees one knows it stopped. */
  close(status: "done" | "failed" = "done", options?: WriteOptions): Promise<OutputAnswer> {
    if (this.closed) return Promise.reject(new TypeError(`output stream ${this.stream} of run ${this.runId} is closed`));
    this.closed = true;
    return this.send({ stream: this.stream, seq: this.seq++, text: "", done: true, status }, options);
  }

  private send(body: WriteOutput, options?: WriteOptions): Promise<OutputAnswer> {
    const sent = this.chain.then(() => this.client.writeOutput(this.runId, body, options));
    this.chain = sent.catch(() => undefined);
    return sent;
  }
}

const sleep = (ms: number, signal?: AbortSignal) => new Promise<void>((resolve, reject) => {
  if (signal?.aborted) return reject(signal.reason);
  const timer = setTimeout(() => {
    signal?.removeEventListener("abort", stop);
    resolve();
  }, ms);
  const stop = () => {
    clearTimeout(timer);
    reject(signal?.reason);
  };
  signal?.addEventListener("abort", stop, { once: true });
});

function path(template: string, ...ids: string[]): string {
  let i = 0;
  return template.replace(/\{[^}]+\}/g, () => encodeURIComponent(ids[i++] ?? ""));
}

function retryAfter(response: Response): number | undefined {
  const raw = response.headers.get("retry-after");
  return raw !== null && /^\d+$/.test(raw) ? Number(raw) : undefined;
}

function combined(signal: AbortSignal | undefined, timeoutMs: number | undefined): AbortSignal | undefined {
  const signals = [signal, timeoutMs === undefined ? undefined : AbortSignal.timeout(timeoutMs)]
    .filter((s): s is AbortSignal => s !== undefined);
  return signals.length > 1 ? AbortSignal.any(signals) : signals[0];
}

export class Runfacts {
  readonly url: string;
  private readonly apiKey: string;
  private readonly retries: number;
  private readonly fetch: typeof fetch;

  constructor(options: RunfactsOptions) {
    if (!options.url) throw new TypeError("Runfacts: `url` is required, e.g. http://127.0.0.1:8090");
    if (!options.apiKey) throw new TypeError("Runfacts: `apiKey` is required (a key of the gateway's key file)");
    this.url = options.url.replace(/\/+$/, "");
    this.apiKey = options.apiKey;
    this.retries = options.retries ?? 4;
    this.fetch = options.fetch ?? globalThis.fetch.bind(globalThis);
  }

  // --- writes --------------------------------------------------------------------------

  /** Start a run; idempotent on `runId` (the same runId again answers the same run, `created: false`). */
  startRun(body: StartRun, options?: WriteOptions): Promise<StartAnswer> {
    return this.post("/runs", body, options);
  }

  /** Record why: only the conclusion's sha256 goes on the log. */
  recordReasoning(runId: string, body: RecordReasoning, options?: WriteOptions): Promise<ReasoningAnswer> {
    return this.post(path("/runs/{run_id}/reasoning", runId), body, options);
  }

  /** Propose a tool call; `approvalId` names the approval it waits for, if the policy asks one. */
  propose(runId: string, body: ProposeCall, options?: WriteOptions): Promise<ProposeAnswer> {
    return this.post(path("/runs/{run_id}/calls", runId), body, options);
  }

  /** Propose a call and wait for its result (see `result`). */
  async call(runId: string, body: ProposeCall, options?: WriteOptions & WaitOptions): Promise<unknown> {
    const proposed = await this.propose(runId, body, options);
    return this.result(runId, proposed.toolCallId, options);
  }

  /** Approve or reject, as the API key's subject (the body cannot name an approver). */
  decide(runId: string, approvalId: string, decision: Decision, options?: WriteOptions): Promise<DecisionAnswer> {
    return this.post(path("/runs/{run_id}/approvals/{approval_id}/decision", runId, approvalId), { decision }, options);
  }

  stop(runId: string, reason = "", options?: WriteOptions): Promise<Answer> {
    return this.post(path("/runs/{run_id}/stop", runId), { reason }, options);
  }

  cancel(runId: string, reason = "", options?: WriteOptions): Promise<Answer> {
    return this.post(path("/runs/{run_id}/cancel", runId), { reason }, options);
  }

  /** One chunk of the run's partial output (the run's agent only: a ForbiddenError for another key). */
  writeOutput(runId: string, body: WriteOutput, options?: WriteOptions): Promise<OutputAnswer> {
    return this.post(path("/runs/{run_id}/output", runId), body, options);
  }

  /** A writer of one of the run's output streams (tokens, progress): `write(text)`, then `close()`. */
  output(runId: string, options?: OutputOptions): OutputWriter {
    return new OutputWriter(this, runId, options?.stream ?? "answer", options?.start ?? 0);
  }

  // --- reads ---------------------------------------------------------------------------

  /** The run's state (the decider's); `minVersion` waits for a write's version. */
  state(runId: string, options?: ReadOptions): Promise<RunState> {
    return this.get(path("/runs/{run_id}/state", runId), this.versionQuery(options), options?.signal);
  }

  /** The run's view for the key's role. */
  view(runId: string, options?: ReadOptions): Promise<RunView> {
    return this.get(path("/runs/{run_id}/view", runId), this.versionQuery(options), options?.signal);
  }

  /** Pending approvals for one of the key's roles (default: all of them), each with the
   * arguments as the approver sees them (`arguments`, one line a field), who asked
   * (`requesters`, who may not approve) and what a decision binds (`displayDigest`). */
  async approvals(options?: { role?: string; signal?: AbortSignal }): Promise<ApprovalItem[]> {
    const query: Record<string, string> = options?.role === undefined ? {} : { role: options.role };
    const found = await this.get<ApprovalList>("/approvals", query, options?.signal);
    return found.approvals;
  }

  // --- live streams --------------------------------------------------------------------

  /** The run's facts, live, from its first (or after `lastEventId`); reconnects after the
   * last id it yielded whenever the connection drops: no fact lost, none twice. */
  events(runId: string, options?: StreamOptions): AsyncGenerator<StreamEvent<RunEvent>> {
    return this.stream<RunEvent>(path("/runs/{run_id}/events", runId), options);
  }

  /** The run's user view, live (each `data` a whole view; `event` "view.archived" when erased). */
  viewStream(runId: string, options?: StreamOptions): AsyncGenerator<StreamEvent<RunView | Record<string, never>>> {
    return this.stream(path("/runs/{run_id}/view", runId), options);
  }

  /** The run's partial output, live: each chunk (stream, seq) once and in order, even when its
   * writer crashed and was retried from the start; reconnects after the last id it yielded. A
   * stream whose last chunk is not `done` stopped (or is still being written). */
  outputStream(runId: string, options?: StreamOptions): AsyncGenerator<StreamEvent<OutputChunk>> {
    return this.stream<OutputChunk>(path("/runs/{run_id}/output", runId), options);
  }

  /** The whole text of one output stream once its writer closed it (`status` "done" or "failed"). */
  async outputText(runId: string, stream = "answer", options?: { timeoutMs?: number; signal?: AbortSignal })
      : Promise<{ text: string; status: "done" | "failed" }> {
    const signal = combined(options?.signal, options?.timeoutMs);
    let text = "";
    try {
      for await (const { data } of this.outputStream(runId, { signal })) {
        if (data.stream !== stream) continue;
        text += data.text;
        if (data.done) return { text, status: data.status ?? "done" };
      }
    } catch (error) {
      if (!signal?.aborted || error instanceof ProblemError) throw error;
    }
    throw new WaitTimeoutError(`run ${runId}: output stream ${stream} not closed within the wait`);
  }

  /** How the call was authorized (by policy, or by whom), once it is; a CallError when it never
   * will be (rejected, expired, invalidated, the run cancelled or under review). */
  async decision(runId: string, toolCallId: string, options?: WaitOptions): Promise<CallDecision> {
    return this.follow(runId, toolCallId, options, (o) => o.decision) as Promise<CallDecision>;
  }

  /** The call's result value once it completed (or reconciliation found it completed); a
   * CallError once it cannot (rejected, expired, failed, review, cancelled). Read over the
   * run's resumable event stream. */
  async result(runId: string, toolCallId: string, options?: WaitOptions): Promise<unknown> {
    return this.follow(runId, toolCallId, options, (o) => o.result);
  }

  private async follow(runId: string, toolCallId: string, options: WaitOptions | undefined,
                       pick: (o: CallOutcome) => { value: unknown } | { error: Error } | undefined): Promise<unknown> {
    const waiting = new AbortController();
    const signal = combined(AbortSignal.any([waiting.signal, ...(options?.signal ? [options.signal] : [])]),
                            options?.timeoutMs);
    const outcome = new CallOutcome(runId, toolCallId);
    try {
      for await (const event of this.events(runId, { signal })) {
        options?.onEvent?.(event);
        outcome.add(event.data);
        const found = pick(outcome);
        if (found !== undefined) {
          if ("error" in found) throw found.error;
          return found.value;
        }
      }
    } catch (error) {
      if (signal?.aborted && !(error instanceof ProblemError)) {
        throw new WaitTimeoutError(`run ${runId}, call ${toolCallId}: no outcome within the wait`, { cause: error });
      }
      throw error;
    } finally {
      waiting.abort();
    }
    throw new WaitTimeoutError(`run ${runId}, call ${toolCallId}: the stream ended`);
  }

  private async *stream<T>(route: string, options?: StreamOptions): AsyncGenerator<StreamEvent<T>> {
    const signal = options?.signal;
    let last = options?.lastEventId;
    let retryMs = 1000;
    let failures = 0;
    const maxFailures = options?.maxFailures ?? 10;
    while (!signal?.aborted) {
      let cause: unknown;
      try {
        const headers: Record<string, string> = { Authorization: `Bearer ${this.apiKey}`, Accept: "text/event-stream" };
        if (last !== undefined) headers["Last-Event-ID"] = last;
        const response = await this.fetch(this.url + route, { headers, signal: signal ?? null });
        if (!response.ok) {
          const error = await this.problem(response);
          if (!this.retryable(response.status)) throw error;
          cause = error;
          retryMs = Math.max(retryMs, (error.retryAfterS ?? 1) * 1000);
        } else if (response.body === null) {
          cause = new ConnectionError(`${route}: the gateway answered no body`);
        } else {
          for await (const frame of sseFrames(response.body)) {
            if (frame.retry !== undefined) retryMs = frame.retry;
            if (frame.event === "") continue;
            failures = 0;
            if (frame.id !== undefined && last !== undefined && !after(frame.id, last)) continue; // seen already
            if (frame.id !== undefined) last = frame.id;
            yield { id: frame.id ?? "", event: frame.event, data: JSON.parse(frame.data) as T };
          }
          cause = new ConnectionError(`${route}: the gateway ended the stream`);
        }
      } catch (error) {
        if (signal?.aborted) return;
        if (error instanceof ProblemError) throw error;
        cause = error; // the connection dropped (or never opened): reconnect after `last`
      }
      if (options?.reconnect === false) return;
      if (++failures > maxFailures) {
        throw new ConnectionError(`${route}: ${maxFailures} reconnections in a row failed`, { cause });
      }
      options?.onReconnect?.(last, cause);
      try {
        await sleep(Math.min(retryMs * Math.max(1, failures), 30_000), signal);
      } catch {
        return;
      }
    }
  }

  // --- transport -----------------------------------------------------------------------

  private versionQuery(options?: ReadOptions): Record<string, string> {
    const query: Record<string, string> = {};
    if (options?.minVersion !== undefined) query["min_version"] = String(options.minVersion);
    if (options?.waitS !== undefined) query["wait"] = String(options.waitS);
    return query;
  }

  private retryable(status: number): boolean {
    return status === 429 || status === 503;
  }

  private async problem(response: Response): Promise<ProblemError> {
    const text = await response.text();
    let problem: Problem;
    try {
      problem = JSON.parse(text) as Problem;
      if (typeof problem !== "object" || problem === null || typeof problem.status !== "number") throw new Error();
    } catch {
      problem = { type: "about:blank", title: response.statusText || "HTTP error", status: response.status,
                  detail: text.slice(0, 500) } as Problem;
    }
    return problemError(problem, retryAfter(response));
  }

  private async get<T>(route: string, query: Record<string, string>, signal?: AbortSignal): Promise<T> {
    const search = new URLSearchParams(query).toString();
    return this.request<T>("GET", route + (search ? `?${search}` : ""), undefined, {}, signal);
  }

  private async post<T>(route: string, body: unknown, options?: WriteOptions): Promise<T> {
    const key = options?.idempotencyKey ?? crypto.randomUUID();
    return this.request<T>("POST", route, JSON.stringify(body), { "Idempotency-Key": key,
                                                                  "Content-Type": "application/json" },
                           options?.signal);
  }

  /** One request, retried (with the same Idempotency-Key) when the gateway could not be reached,
   * was over the rate, or asked to come back (503, or 409 while the first try is still running). */
  private async request<T>(method: string, route: string, body: string | undefined, headers: Record<string, string>,
                           signal?: AbortSignal): Promise<T> {
    for (let attempt = 0; ; attempt++) {
      let response: Response;
      try {
        response = await this.fetch(this.url + route, {
          method, body: body ?? null, signal: signal ?? null,
          headers: { Authorization: `Bearer ${this.apiKey}`, Accept: "application/json", ...headers },
        });
      } catch (error) {
        if (signal?.aborted || attempt >= this.retries) {
          throw new ConnectionError(`${method} ${this.url}${route}: ${(error as Error).message}`, { cause: error });
        }
        await sleep(250 * 2 ** attempt, signal);
        continue;
      }
      if (response.ok) return (await response.json()) as T;
      const error = await this.problem(response);
      const again = this.retryable(response.status) || (response.status === 409 && error.kind === "idempotency-key-in-flight");
      if (!again || attempt >= this.retries) throw error;
      await sleep(Math.min(30, error.retryAfterS ?? 2 ** attempt) * 1000, signal);
    }
  }
}

// The client against a real `runfacts gateway serve` in front of the real decider, dispatcher and
// payment simulator on the real broker (test/stack.py): the refund story, a live stream resumed
// through forced disconnects, problem documents as typed errors, the types against the served
// OpenAPI document, and docs/http.md's TypeScript example.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { readFileSync, writeFileSync, mkdirSync } from "node:fs";
import { createConnection, createServer, type Socket } from "node:net";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { pathToFileURL } from "node:url";
import ts from "typescript";
import {
  ApprovalRejectedError, CallError, ForbiddenError, InvalidRequestError, NotFoundError, ProblemError, Runfacts, UnauthenticatedError,
  type OutputChunk, type RunEvent, type RunView, type StreamEvent,
} from "@runfacts/client";
import { PACKAGE, REPO, startStack, type Stack } from "./stack.js";

let stack: Stack;
let agent: Runfacts;
let alice: Runfacts;

before(async () => {
  stack = await startStack("gateway");
  agent = new Runfacts({ url: stack.url, apiKey: stack.keys["agent"]! });
  alice = new Runfacts({ url: stack.url, apiKey: stack.keys["alice"]! });
});

after(async () => {
  await stack?.stop();
});

const REFUND = { capability: "payments.refund", target: "o-1",
                 arguments: { orderId: "o-1", amountMinor: 4200, currency: "EUR" } };

async function newRun(client: Runfacts = agent): Promise<string> {
  const runId = `ts-${randomUUID().slice(0, 8)}`;
  const started = await client.startRun({ runId, goal: `ticket:${runId}`, summary: "Refund a kettle",
                                          userId: "customer-42", tenant: "acme" });
  assert.equal(started.created, true);
  return runId;
}

test("start -> propose -> a person approves (seeing the arguments) -> the result", async () => {
  const runId = await newRun();
  const reasoned = await agent.recordReasoning(runId, { conclusion: "damaged on arrival", evidence: ["order:o-1"] });
  const proposed = await agent.propose(runId, { ...REFUND, reasoningId: reasoned.reasoningId });
  assert.ok(proposed.approvalId, "the policy asks a support agent's approval for a refund");
  assert.ok(proposed.version > reasoned.version);

  const pending = (await alice.approvals({ role: "support_agent" })).filter((a) => a.runId === runId);
  assert.equal(pending.length, 1);
  const [item] = pending;
  assert.equal(item!.approvalId, proposed.approvalId);
  assert.equal(item!.asks, "refund on o-1 (high risk)");
  assert.deepEqual(item!.requesters, ["customer-42"]);
  assert.ok(item!.arguments!.some((line) => line.startsWith("amountMinor") && line.includes("4200")), String(item!.arguments));
  assert.ok(item!.displayDigest);

  const result = agent.result(runId, proposed.toolCallId, { timeoutMs: 90_000 });
  const decided = await alice.decide(runId, proposed.approvalId!, "approve");
  assert.equal(decided.approver, "alice");
  const decision = await agent.decision(runId, proposed.toolCallId, { timeoutMs: 90_000 });
  assert.deepEqual(decision, { toolCallId: proposed.toolCallId, approvalId: proposed.approvalId, approver: "alice" });
  const value = (await result) as Record<string, unknown>;
  assert.equal(value["amountMinor"], 4200, JSON.stringify(value));
  assert.match(String(value["refundId"]), /^re_/); // the payment provider's refund

  const state = await agent.state(runId, { minVersion: decided.version });
  assert.ok(state.version >= decided.version);
  const view = await agent.view(runId, { minVersion: decided.version });
  assert.ok(view.version >= decided.version);
  let streamed: RunView | undefined; // the user view, live
  for await (const frame of agent.viewStream(runId, { signal: AbortSignal.timeout(60_000) })) {
    assert.equal(frame.event, "view");
    streamed = frame.data as RunView;
    if (streamed.version >= decided.version) break;
  }
  assert.ok(streamed !== undefined && streamed.version >= decided.version, JSON.stringify(streamed));
});

test("the same Idempotency-Key answers the same; the same runId is the same run", async () => {
  const runId = `ts-${randomUUID().slice(0, 8)}`;
  const body = { runId, goal: "ticket:T-7", summary: "s", userId: "customer-42", tenant: "acme" };
  const first = await agent.startRun(body, { idempotencyKey: `start-${runId}` });
  const again = await agent.startRun(body, { idempotencyKey: `start-${runId}` });
  assert.deepEqual(again, first);
  const other = await agent.startRun(body);
  assert.equal(other.created, false);
  await assert.rejects(agent.startRun({ ...body, summary: "another" }, { idempotencyKey: `start-${runId}` }),
                       (e: unknown) => e instanceof InvalidRequestError && e.field === "Idempotency-Key");
});

test("problem documents are typed errors carrying the document", async () => {
  const runId = await newRun();
  const proposed = await agent.propose(runId, { ...REFUND, target: "o-2", arguments: { ...REFUND.arguments, orderId: "o-2" } });
  const requester = new Runfacts({ url: stack.url, apiKey: stack.keys["requester"]! });
  await assert.rejects(requester.decide(runId, proposed.approvalId!, "approve"), (e: unknown) => {
    assert.ok(e instanceof ForbiddenError && e instanceof ProblemError, String(e));
    assert.equal(e.status, 403);
    assert.equal(e.reason, "self_approval_forbidden"); // the decider's reason code
    assert.equal(e.kind, "command-rejected");
    assert.equal(e.problem.status, 403);
    assert.ok(e.fix && e.message.includes("self_approval_forbidden"));
    return true;
  });
  await assert.rejects(alice.propose(runId, REFUND), (e: unknown) =>
    e instanceof ForbiddenError && e.reason === "forbidden_role");
  await assert.rejects(agent.startRun({ goal: "x", summary: "", userId: "u" }), (e: unknown) => {
    assert.ok(e instanceof InvalidRequestError, String(e));
    assert.equal(e.field, "summary");
    assert.ok(Array.isArray(e.problem.errors) && e.problem.errors.length >= 1);
    return true;
  });
  await assert.rejects(agent.state("no-such-run"), (e: unknown) => e instanceof NotFoundError && e.field === "runId");
  const stranger = new Runfacts({ url: stack.url, apiKey: "not-a-key-0123456789" });
  await assert.rejects(stranger.approvals(), (e: unknown) =>
    e instanceof UnauthenticatedError && e.field === "Authorization" && e.fix !== undefined);
  // a call rejected by its approver is a typed CallError
  const rejected = agent.result(runId, proposed.toolCallId, { timeoutMs: 60_000 }).then(() => undefined, (e) => e);
  await alice.decide(runId, proposed.approvalId!, "reject");
  const error = await rejected;
  assert.ok(error instanceof ApprovalRejectedError && error instanceof CallError, String(error));
  assert.equal(error.approver, "alice");
  assert.equal(error.event.eventType, "approval.rejected");
});

/** A TCP proxy whose drop() cuts every open connection (a flaky network, a restarted load balancer). */
function droppingProxy(upstream: URL): Promise<{ url: string; drop(): void; close(): void; drops: number }> {
  const open = new Set<Socket>();
  const server = createServer((client) => {
    const upstreamSocket = createConnection(Number(upstream.port), upstream.hostname);
    for (const s of [client, upstreamSocket]) {
      open.add(s);
      s.on("error", () => undefined);
      s.on("close", () => open.delete(s));
    }
    client.pipe(upstreamSocket).pipe(client);
  });
  return new Promise((done) => server.listen(0, "127.0.0.1", () => {
    const port = (server.address() as { port: number }).port;
    const proxy = {
      url: `http://127.0.0.1:${port}`, drops: 0,
      drop() {
        proxy.drops++;
        for (const s of open) s.destroy();
      },
      close() {
        proxy.drop();
        server.close();
      },
    };
    done(proxy);
  }));
}

test("a live stream resumes after forced disconnects: 0 lost, 0 duplicated", async (t) => {
  const runId = await newRun();
  const proxy = await droppingProxy(new URL(stack.url));
  const through = new Runfacts({ url: proxy.url, apiKey: stack.keys["agent"]! });
  const writes = 24;
  const stop = new AbortController();
  const resumed: StreamEvent<RunEvent>[] = [];
  const reasonings = () => resumed.filter((e) => e.event === "reasoning.recorded").length;
  let reconnects = 0;
  const reader = (async () => {
    for await (const event of through.events(runId, { signal: stop.signal, onReconnect: () => reconnects++ })) {
      resumed.push(event);
      if (reasonings() === writes) return;
    }
  })();
  const deadline = Date.now() + 120_000;
  for (let i = 0; i < writes; i++) {
    if (i > 0 && i % 3 === 0) proxy.drop(); // cut the reader's connection after every 3rd fact it read
    await agent.recordReasoning(runId, { conclusion: `step ${i}` });
    while (reasonings() <= i && Date.now() < deadline) await new Promise((ok) => setTimeout(ok, 20));
  }
  const done = reasonings() === writes;
  stop.abort(); // ends the reader if it is not done
  await reader;
  proxy.close();
  assert.ok(done, `read ${resumed.length} facts, ${reconnects} reconnects, within 120 s`);

  const oracle: StreamEvent<RunEvent>[] = []; // one undisturbed read of the same facts
  for await (const event of agent.events(runId)) {
    oracle.push(event);
    if (oracle.length === resumed.length) break;
  }
  const ids = resumed.map((e) => e.id);
  assert.equal(new Set(ids).size, ids.length, "no fact twice");
  assert.deepEqual(ids, oracle.map((e) => e.id), "every fact, in log order");
  assert.deepEqual(resumed.map((e) => e.data.eventId), oracle.map((e) => e.data.eventId));
  assert.ok(reconnects >= writes / 3 - 1, `${proxy.drops} drops, ${reconnects} reconnects`);
  t.diagnostic(`${resumed.length} facts through ${reconnects} reconnects: 0 lost, 0 duplicated`);

  // a new reader resuming after a given id starts right after it
  const from = ids[5]!;
  for await (const event of agent.events(runId, { lastEventId: from })) {
    assert.equal(event.id, ids[6]);
    break;
  }
});

test("a run's output: a writer retried from the start shows a reader each chunk once, through dropped connections", async () => {
  const runId = await newRun();
  const proxy = await droppingProxy(new URL(stack.url));
  const through = new Runfacts({ url: proxy.url, apiKey: stack.keys["agent"]! });
  const got: StreamEvent<OutputChunk>[] = [];
  let reconnects = 0;
  const stop = new AbortController();
  const reader = (async () => {
    for await (const event of through.outputStream(runId, { signal: stop.signal, onReconnect: () => reconnects++ })) {
      got.push(event);
      if (event.data.done) return;
    }
  })();
  const received = async (count: number) => { // the reader has `count` chunks (then a drop cuts a live connection)
    const until = Date.now() + 30_000;
    while (got.length < count && Date.now() < until) await new Promise((ok) => setTimeout(ok, 20));
  };
  const first = agent.output(runId); // dies after 6 chunks: no close, no done
  for (let i = 0; i < 6; i++) {
    await first.write(`tok${i} `);
    await received(i + 1);
    if (i === 2) proxy.drop();
  }
  const retry = agent.output(runId); // the retry starts over from seq 0
  for (let i = 0; i < 12; i++) {
    await retry.write(`tok${i} `);
    if (i < 6) continue; // the reader had these: the gateway skips them
    await received(i + 1);
    if (i === 7 || i === 9) proxy.drop();
  }
  await retry.close();
  const deadline = setTimeout(() => stop.abort(), 60_000);
  await reader;
  clearTimeout(deadline);
  proxy.close();
  assert.deepEqual(got.map((e) => e.data.seq), [...Array(13).keys()], `each chunk once, in order (${reconnects} reconnects)`);
  assert.equal(got.map((e) => e.data.text).join(""), [...Array(12).keys()].map((i) => `tok${i} `).join(""));
  assert.ok(got.at(-1)!.data.done && got.at(-1)!.data.status === "done");
  assert.ok(reconnects >= 3, `${proxy.drops} drops, ${reconnects} reconnects`);
  assert.deepEqual(await agent.outputText(runId, "answer", { timeoutMs: 30_000 }),
                   { text: [...Array(12).keys()].map((i) => `tok${i} `).join(""), status: "done" });

  // only the run's agent writes its output: a support agent's (browser's) key is refused
  await assert.rejects(alice.output(runId, { stream: "forged" }).write("x"),
                       (e: unknown) => e instanceof ForbiddenError && e.problem.field === "Authorization");
});

test("the committed types are those of the OpenAPI document the gateway serves", async () => {
  const served = await (await fetch(`${stack.url}/openapi.json`)).json();
  const generator = await import(pathToFileURL(join(PACKAGE, "scripts", "generate-types.mjs")).href);
  const committed = readFileSync(generator.TARGET, "utf8");
  assert.equal(committed, await generator.render(served),
               "src/generated/openapi.ts drifted from the gateway's /openapi.json: run `npm run generate` and rebuild");
});

test("docs/http.md's TypeScript example (examples/refund_agent.ts) runs as written", async () => {
  const doc = readFileSync(join(REPO, "docs", "http.md"), "utf8");
  const blocks = [...doc.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]!);
  assert.equal(blocks.length, 2, "two ```ts blocks in docs/http.md: a run's output, and the refund agent");
  const source = blocks.find((b) => b.includes("approvals("))!;
  const example = readFileSync(join(REPO, "examples", "refund_agent.ts"), "utf8");
  assert.ok(example.endsWith(source), "examples/refund_agent.ts ends with docs/http.md's block, unchanged");
  const dir = join(PACKAGE, "dist-test", "docs");
  mkdirSync(dir, { recursive: true });
  const file = join(dir, "http-example.ts");
  writeFileSync(file, source);
  const options: ts.CompilerOptions = { module: ts.ModuleKind.NodeNext, moduleResolution: ts.ModuleResolutionKind.NodeNext,
                                        target: ts.ScriptTarget.ES2022, strict: true, noEmit: true, types: ["node"],
                                        skipLibCheck: true };
  const program = ts.createProgram([file], options);
  const problems = ts.getPreEmitDiagnostics(program).map((d) => ts.flattenDiagnosticMessageText(d.messageText, "\n"));
  assert.deepEqual(problems, [], "the example type-checks");
  const js = ts.transpileModule(source, { compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 } });
  writeFileSync(join(dir, "http-example.mjs"), js.outputText);
  const runId = `ts-doc-${randomUUID().slice(0, 8)}`;
  Object.assign(process.env, { RUNFACTS_URL: stack.url, AGENT_KEY: stack.keys["agent"], ALICE_KEY: stack.keys["alice"],
                               RUN_ID: runId });
  const agentModule = await import(pathToFileURL(join(dir, "http-example.mjs")).href);
  const value = (await agentModule.done) as Record<string, unknown>;
  assert.equal(value["orderId"], "order-002", JSON.stringify(value));
  assert.match(String(value["refundId"]), /^re_/);
  const state = await agent.state(runId);
  assert.equal(state.runId, runId);
});

test("docs/http.md's TypeScript output example type-checks and runs as written", async () => {
  const doc = readFileSync(join(REPO, "docs", "http.md"), "utf8");
  const source = [...doc.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]!).find((b) => b.includes(".output("))!;
  const dir = join(PACKAGE, "dist-test", "docs");
  mkdirSync(dir, { recursive: true });
  const file = join(dir, "http-output.ts");
  writeFileSync(file, source);
  const options: ts.CompilerOptions = { module: ts.ModuleKind.NodeNext, moduleResolution: ts.ModuleResolutionKind.NodeNext,
                                        target: ts.ScriptTarget.ES2022, strict: true, noEmit: true, types: ["node"],
                                        skipLibCheck: true };
  const problems = ts.getPreEmitDiagnostics(ts.createProgram([file], options))
    .map((d) => ts.flattenDiagnosticMessageText(d.messageText, "\n"));
  assert.deepEqual(problems, [], "the example type-checks");
  const js = ts.transpileModule(source, { compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 } });
  writeFileSync(join(dir, "http-output.mjs"), js.outputText);
  const runId = await newRun();
  Object.assign(process.env, { RUNFACTS_URL: stack.url, AGENT_KEY: stack.keys["agent"], RUN_ID: runId });
  const example = await import(pathToFileURL(join(dir, "http-output.mjs")).href);
  assert.equal(example.answer, "The refund of 42.00 EUR is on its way.");
});

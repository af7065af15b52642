// Issue 38: a TypeScript MCP client (@modelcontextprotocol/sdk) lists and calls governed tools
// through `runfacts mcp serve` over stdio, on the real broker (test/stack.py mcp): the decider and
// dispatcher serve the ledger MCP server's tools; a support agent approves through the gateway
// with @runfacts/client while the MCP call waits.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, test } from "node:test";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { McpError } from "@modelcontextprotocol/sdk/types.js";
import { Runfacts } from "@runfacts/client";
import { startStack, type Stack } from "./stack.js";

let stack: Stack;
let client: Client;
let approver: Runfacts;

before(async () => {
  stack = await startStack("mcp");
  const mcp = stack.mcp!;
  client = new Client({ name: "runfacts-ts-test", version: "0.1.0" });
  await client.connect(new StdioClientTransport({ command: mcp.command, args: mcp.args, env: mcp.env, cwd: mcp.cwd,
                                                  stderr: "inherit" }));
  approver = new Runfacts({ url: stack.url, apiKey: stack.keys["approver"]! });
});

after(async () => {
  await client?.close();
  await stack?.stop();
});

const LONG = { timeout: 150_000, resetTimeoutOnProgress: true };

test("tools/list names the governed tools with their argument schemas", async () => {
  const { tools } = await client.listTools();
  const names = tools.map((t) => t.name);
  for (const name of ["ledger.credit", "ledger.balance"]) assert.ok(names.includes(name), names.join(", "));
  const credit = tools.find((t) => t.name === "ledger.credit")!;
  assert.deepEqual(Object.keys(credit.inputSchema.properties ?? {}).sort(), ["account", "amount_minor"]);
});

test("a read-only tool answers without an approval", async () => {
  const result = await client.callTool({ name: "ledger.balance", arguments: { account: "acct-7" } }, undefined, LONG);
  assert.notEqual(result.isError, true, JSON.stringify(result));
  assert.match(String((result._meta as Record<string, unknown>)["io.runfacts/runId"]), /^mcp-/);
});

test("a write waits for a person's approval, then runs once; the same call again is the same outcome", async () => {
  const key = `ts-credit-${randomUUID()}`;
  const progress: string[] = [];
  const call = { name: "ledger.credit", arguments: { account: "acct-42", amount_minor: 1250 },
                 _meta: { "io.runfacts/idempotencyKey": key } };
  const answer = client.callTool(call, undefined, { ...LONG, onprogress: (p) => progress.push(p.message ?? "") });

  let pending: Awaited<ReturnType<Runfacts["approvals"]>> = [];
  for (let i = 0; i < 120 && pending.length === 0; i++) {
    pending = (await approver.approvals({ role: "support_agent" })).filter((a) => a.asks.includes("credit"));
    if (pending.length === 0) await new Promise((ok) => setTimeout(ok, 500));
  }
  assert.equal(pending.length, 1, "the MCP call waits for one approval");
  const [approval] = pending;
  assert.ok(approval!.arguments!.some((line) => line.includes("1250")), String(approval!.arguments));
  await approver.decide(approval!.runId, approval!.approvalId, "approve");

  const result = await answer;
  assert.notEqual(result.isError, true, JSON.stringify(result));
  const credited = result.structuredContent as Record<string, unknown>;
  assert.equal(credited["account"], "acct-42");
  assert.equal(credited["amount_minor"], 1250);
  assert.equal((result._meta as Record<string, unknown>)["io.runfacts/runId"], approval!.runId);
  assert.ok(progress.some((m) => m.includes("waiting for approval")), progress.join(" | "));

  const again = await client.callTool(call, undefined, LONG); // a client's retry: the same outcome, no second run
  assert.deepEqual(again.structuredContent, result.structuredContent);
});

test("a rejected approval is an MCP error naming the run", async () => {
  const call = { name: "ledger.credit", arguments: { account: "acct-43", amount_minor: 10 },
                 _meta: { "io.runfacts/idempotencyKey": `ts-reject-${randomUUID()}` } };
  const answer = client.callTool(call, undefined, LONG).then(() => undefined, (e: unknown) => e);
  let pending: Awaited<ReturnType<Runfacts["approvals"]>> = [];
  for (let i = 0; i < 120 && pending.length === 0; i++) {
    pending = (await approver.approvals()).filter((a) => a.arguments!.some((line) => line.includes("acct-43")));
    if (pending.length === 0) await new Promise((ok) => setTimeout(ok, 500));
  }
  await approver.decide(pending[0]!.runId, pending[0]!.approvalId, "reject");
  const error = await answer;
  assert.ok(error instanceof McpError, String(error));
  assert.equal(error.code, -32001);
  assert.equal((error.data as Record<string, unknown>)["io.runfacts/runId"], pending[0]!.runId);
});

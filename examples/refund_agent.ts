// The refund agent in TypeScript over the runfacts HTTP gateway (docs/http.md, "TypeScript"):
//   RUNFACTS_URL=http://127.0.0.1:8090 AGENT_KEY=... ALICE_KEY=... node refund_agent.mjs  (after tsc)
// The same text as docs/http.md's block; clients/typescript/test/gateway.test.ts runs it against a live gateway.
import { Runfacts } from "@runfacts/client";

const url = process.env.RUNFACTS_URL ?? "http://127.0.0.1:8090";
const agent = new Runfacts({ url, apiKey: process.env.AGENT_KEY! });
const alice = new Runfacts({ url, apiKey: process.env.ALICE_KEY! }); // a support agent's UI
const runId = process.env.RUN_ID ?? "refund-T-9002";

await agent.startRun({ runId, goal: "ticket:T-9002", summary: "Refund the damaged kettle",
                       userId: "customer-42", tenant: "acme" });
const why = await agent.recordReasoning(runId, { conclusion: "damaged on arrival, within 30 days",
                                                 evidence: ["order:order-002"] });
const call = await agent.propose(runId, {
  capability: "payments.refund", target: "order-002", reasoningId: why.reasoningId,
  arguments: { orderId: "order-002", amountMinor: 4200, currency: "EUR" },
});
// the result, read from the run's event stream (resumed after any dropped connection)
const result = agent.result(runId, call.toolCallId, { timeoutMs: 120_000 });

// the approver: what waits for the role, with the arguments as the approver sees them
for (const approval of await alice.approvals({ role: "support_agent" })) {
  if (approval.runId !== runId) continue;
  console.log(approval.asks, approval.arguments, "asked by", approval.requesters);
  await alice.decide(runId, approval.approvalId, "approve");
}
export const done = result;
console.log("refunded:", await result);

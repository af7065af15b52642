// The SSE parser (pure): line endings split across chunks, multi-line data, comments, retry.
import assert from "node:assert/strict";
import { test } from "node:test";
import { sseFrames, type SseFrame } from "@runfacts/client";

async function frames(...chunks: string[]): Promise<SseFrame[]> {
  const encoded = chunks.map((c) => new TextEncoder().encode(c));
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      for (const chunk of encoded) controller.enqueue(chunk);
      controller.close();
    },
  });
  const out: SseFrame[] = [];
  for await (const frame of sseFrames(body)) out.push(frame);
  return out;
}

test("frames split anywhere, CRLF across chunks, comments and retry", async () => {
  const got = await frames("retry: 1000\n\n: keep-alive\n\nid: 0:1", "7\r", "\nevent: run.created\r\ndata: {\"a\":", "1}\r\n\r\n",
                           "id: 0:18\ndata: x\ndata: y\n\ndata: unterminated");
  assert.deepEqual(got, [
    { id: undefined, event: "", data: "", retry: 1000 },
    { id: "0:17", event: "run.created", data: "{\"a\":1}", retry: undefined },
    { id: "0:18", event: "message", data: "x\ny", retry: undefined },
  ]);
});

// Server-Sent Events, parsed as the WHATWG spec reads an event stream (lines ending in CR, LF or
// CRLF; `data:` lines joined; comments ignored; `retry:` a reconnection delay), over fetch.

export interface SseFrame {
  id: string | undefined;
  event: string;
  data: string;
  retry: number | undefined;
}

/** The frames of an event stream's body; a frame with only `retry:` has `data` "" and event "". */
export async function* sseFrames(body: ReadableStream<Uint8Array>): AsyncGenerator<SseFrame> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  let data: string[] = [];
  let event = "";
  let id: string | undefined;
  let retry: number | undefined;
  let pendingCr = false;
  try {
    while (true) {
      const { value, done } = await reader.read();
      if (done) return; // an unfinished frame at the end is dropped (the spec's rule)
      buffer += decoder.decode(value, { stream: true });
      if (pendingCr && buffer.startsWith("\n")) buffer = buffer.slice(1);
      pendingCr = false;
      let at: number;
      while ((at = buffer.search(/[\r\n]/)) >= 0) {
        if (buffer[at] === "\r" && at === buffer.length - 1) {
          pendingCr = true; // a CRLF may be split across chunks
        }
        const line = buffer.slice(0, at);
        buffer = buffer.slice(at + (buffer.startsWith("\r\n", at) ? 2 : 1));
        if (line === "") {
          if (data.length > 0 || retry !== undefined) {
            yield { id, event: data.length > 0 ? event || "message" : "", data: data.join("\n"), retry };
          }
          data = [];
          event = "";
          retry = undefined;
          continue;
        }
        if (line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const name = colon < 0 ? line : line.slice(0, colon);
        let field = colon < 0 ? "" : line.slice(colon + 1);
        if (field.startsWith(" ")) field = field.slice(1);
        if (name === "data") data.push(field);
        else if (name === "event") event = field;
        else if (name === "id" && !field.includes("\0")) id = field;
        else if (name === "retry" && /^\d+$/.test(field)) retry = Number(field);
      }
    }
  } finally {
    await reader.cancel().catch(() => undefined);
  }
}

/** Whether position `a` (`<partition>:<offset>`) comes after `b` on the same partition. */
export function after(a: string, b: string): boolean {
  const [pa, oa] = a.split(":");
  const [pb, ob] = b.split(":");
  if (pa !== pb) return true; // not comparable: let the gateway decide
  return BigInt(oa ?? "0") > BigInt(ob ?? "0");
}

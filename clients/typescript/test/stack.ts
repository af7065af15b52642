// A real stack for one test file: test/stack.py (the repository's Python, .venv) starts it on
// the real broker and prints where it answers; closing its stdin stops it and deletes its topics.
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

export const PACKAGE = resolve(dirname(fileURLToPath(import.meta.url)), "..", ".."); // dist-test/test -> the package
export const REPO = resolve(PACKAGE, "..", "..");

export interface StackInfo {
  url: string;
  keys: Record<string, string>;
  prefix: string;
  mcp?: { command: string; args: string[]; env: Record<string, string>; cwd: string };
}

export interface Stack extends StackInfo {
  stop(): Promise<void>;
}

export async function startStack(kind: "gateway" | "mcp", timeoutMs = 240_000): Promise<Stack> {
  const python = process.env["RUNFACTS_PYTHON"] ?? join(REPO, ".venv", "bin", "python");
  const workdir = mkdtempSync(join(tmpdir(), `runfacts-ts-${kind}-`));
  const env = { ...process.env };
  const child: ChildProcess = spawn(python, [join(PACKAGE, "test", "stack.py"), kind, workdir],
                                    { cwd: REPO, env, stdio: ["pipe", "pipe", "inherit"] });
  const exited = new Promise<number | null>((done) => child.once("exit", (code) => done(code)));
  const lines = createInterface({ input: child.stdout! });
  const first = new Promise<string>((done, fail) => {
    lines.once("line", done);
    child.once("exit", (code) => fail(new Error(`test/stack.py ${kind} exited ${code} before answering (see stderr)`)));
  });
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, fail) => {
    timer = setTimeout(() => fail(new Error(`test/stack.py ${kind}: not up within ${timeoutMs} ms`)), timeoutMs);
  });
  const began = Date.now();
  let info: StackInfo;
  try {
    info = JSON.parse(await Promise.race([first, late])) as StackInfo;
  } catch (error) {
    child.kill("SIGTERM");
    throw error;
  } finally {
    clearTimeout(timer);
  }
  console.error(`# stack ${kind} up in ${Date.now() - began} ms`);
  return {
    ...info,
    async stop() {
      const stopping = Date.now();
      child.stdin?.end();
      const killer = setTimeout(() => child.kill("SIGKILL"), 60_000);
      await exited;
      clearTimeout(killer);
      console.error(`# stack ${kind} stopped in ${Date.now() - stopping} ms`);
    },
  };
}

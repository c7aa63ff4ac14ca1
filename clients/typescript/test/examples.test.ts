/**
 * Both published TypeScript examples, run as their own Node programs against a real
 * `assay serve`, changed only in the import line.
 */

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";

import { startServer, type AssayServer } from "./support/server.js";

const EXAMPLES = fileURLToPath(new URL("./examples/", import.meta.url));
const KEY = "example-key";
let server: AssayServer;
let workdir: string;

before(async () => {
  // "API_KEY" is the literal key in the completeness example.
  server = await startServer([KEY, "API_KEY"]);
  // An empty working directory, so dotenv finds no stray .env file.
  workdir = mkdtempSync(join(tmpdir(), "assay-ts-example-"));
});

after(async () => {
  await server?.stop();
  if (workdir) rmSync(workdir, { recursive: true, force: true });
});

/** Run one compiled example with the server's URL in $ASSAY_BASE_URL; its exit and output. */
function runExample(
  name: string,
  env: Record<string, string> = {},
): { status: number | null; stdout: string; stderr: string } {
  const result = spawnSync(process.execPath, [join(EXAMPLES, name)], {
    cwd: workdir,
    env: { ...process.env, ASSAY_BASE_URL: server.url, ...env },
    encoding: "utf-8",
    timeout: 120_000,
  });
  return { status: result.status, stdout: result.stdout, stderr: result.stderr };
}

test("the output relevance example prints the server's verdicts as JSON", () => {
  const run = runExample("output_relevance.js", { AIMON_API_KEY: KEY });
  assert.equal(run.status, 0, run.stderr);
  const prefix = "AIMon response: ";
  assert.ok(run.stdout.startsWith(prefix), run.stdout);
  const response = JSON.parse(run.stdout.slice(prefix.length));
  assert.equal(response.length, 1);
  const result = response[0].output_relevance;
  assert.equal(result.instructions_list.length, 4);
  assert.equal(
    result.instructions_list[0].instruction,
    "Response should directly address the core intent of the user query.",
  );
  for (const verdict of result.instructions_list) {
    assert.equal(verdict.label, verdict.follow_probability >= 0.5);
    assert.ok(verdict.explanation.length > 0, "explain: true asks for explanations");
  }
  const labelled = result.instructions_list.filter(
    (verdict: { label: boolean }) => verdict.label,
  ).length;
  assert.equal(result.score, labelled / 4);
  // A relevant answer to the question: the judge should see it as such.
  assert.ok(result.score >= 0.75, `score ${result.score}`);
});

test("the completeness example sends its positional arguments and prints the result", () => {
  const run = runExample("completeness.js");
  assert.equal(run.status, 0, run.stderr);
  // console.log's inspection of the answer: one item holding the completeness result.
  const printed =
    /^Response from detect: \[ \{ completeness: \{ instructions_list: \[Array\], score: ([0-9.]+) \} \} \]\n$/.exec(
      run.stdout,
    );
  assert.ok(printed, run.stdout);
  const score = Number(printed[1]);
  // Completeness scores are fractions of its 8 instructions.
  assert.ok(Number.isInteger(score * 8) && score >= 0 && score <= 1, `score ${score}`);
});

test("the output relevance example fails loudly when its key is wrong", () => {
  const run = runExample("output_relevance.js", { AIMON_API_KEY: "not-a-key" });
  assert.notEqual(run.status, 0);
  assert.match(run.stderr, /AuthenticationError: 401 invalid API key/);
});

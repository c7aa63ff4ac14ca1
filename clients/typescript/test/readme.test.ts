/**
 * The repository README's TypeScript example compiles: users copy it, and it once used a
 * `jobId` it never defined without any test noticing.
 */

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import { REPO_ROOT } from "./support/server.js";
import { compileConsumer, type Compiled } from "./support/tsc.js";

const SECTION = "## TypeScript client";

/** The first ```ts block of the README's "## TypeScript client" section. */
function readmeExample(): string {
  const lines = readFileSync(join(REPO_ROOT, "README.md"), "utf-8").split(/\r?\n/);
  const start = lines.findIndex((line) => line.trim() === SECTION);
  assert.notEqual(start, -1, `README.md has no "${SECTION}" section`);
  const block: string[] = [];
  let inside = false;
  for (const line of lines.slice(start + 1)) {
    if (!inside && line.startsWith("## ")) break; // the next section: no block in this one
    if (!inside && /^```(ts|typescript)\s*$/.test(line)) inside = true;
    else if (inside && line.startsWith("```")) return block.join("\n") + "\n";
    else if (inside) block.push(line);
  }
  assert.fail(`no complete \`\`\`ts block under "${SECTION}" in README.md`);
}

/** How a user compiles the example: ES2022 for its top-level await, Node for `process`. */
function compileExample(source: string): Compiled {
  return compileConsumer(source, { target: "ES2022", lib: ["ES2022"], types: ["node"] });
}

test("the README's TypeScript example compiles (strict, ES2022, NodeNext, no skipLibCheck)", () => {
  const compiled = compileExample(readmeExample());
  assert.ok(compiled.ok, compiled.output);
});

test("the README check fails on a broken example: a job id used but never defined", () => {
  // The mistake the README once made, on a copy: the check must catch it.
  const example = readmeExample();
  assert.match(example, /const jobId = /);
  const compiled = compileExample(example.replace("const jobId = ", "const jobIdd = "));
  assert.ok(!compiled.ok, "tsc accepted the broken example");
  assert.match(compiled.output, /Cannot find name 'jobId'/);
});

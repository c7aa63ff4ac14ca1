/**
 * The published `.d.ts` compiles for a consumer on an older target: a type that needs lib
 * ES2022 (such as `ErrorOptions`) broke every consumer compiling for ES2020 without
 * skipLibCheck.
 */

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import { PACKAGE_ROOT } from "./support/server.js";

const TSC = join(PACKAGE_ROOT, "node_modules", "typescript", "bin", "tsc");

for (const [setting, environment] of [
  ["a browser", { lib: ["ES2020", "DOM"], types: [] }],
  ["Node", { lib: ["ES2020"], types: ["node"] }],
] as const) {
  test(`a consumer compiling for ES2020 (${setting}) without skipLibCheck`, () => {
    // Inside the package (under dist/), so that "@assay/client" resolves to the built package.
    const folder = mkdtempSync(join(PACKAGE_ROOT, "dist", "consumer-"));
    try {
      writeFileSync(
        join(folder, "consumer.ts"),
        'import Client, { APIError } from "@assay/client";\n' +
          "export const client: Client = new Client();\n" +
          "export const error = new APIError(500, 'x', undefined, {});\n",
      );
      const compilerOptions = {
        target: "ES2020",
        module: "NodeNext",
        moduleResolution: "NodeNext",
        strict: true,
        noEmit: true,
        skipLibCheck: false,
        typeRoots: [join(PACKAGE_ROOT, "node_modules", "@types")],
        ...environment,
      };
      writeFileSync(
        join(folder, "tsconfig.json"),
        JSON.stringify({ compilerOptions, files: ["consumer.ts"] }),
      );
      const run = spawnSync(process.execPath, [TSC, "-p", folder], {
        encoding: "utf-8",
        timeout: 120_000,
      });
      assert.equal(run.status, 0, run.stdout + run.stderr);
    } finally {
      rmSync(folder, { recursive: true, force: true });
    }
  });
}

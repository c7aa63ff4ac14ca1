/**
 * The published `.d.ts` compiles for a consumer on an older target: a type that needs lib
 * ES2022 (such as `ErrorOptions`) broke every consumer compiling for ES2020 without
 * skipLibCheck.
 */

import assert from "node:assert/strict";
import { test } from "node:test";

import { compileConsumer } from "./support/tsc.js";

for (const [setting, environment] of [
  ["a browser", { lib: ["ES2020", "DOM"], types: [] }],
  ["Node", { lib: ["ES2020"], types: ["node"] }],
] as const) {
  test(`a consumer compiling for ES2020 (${setting}) without skipLibCheck`, () => {
    const compiled = compileConsumer(
      'import Client, { APIError } from "@assay/client";\n' +
        "export const client: Client = new Client();\n" +
        "export const error = new APIError(500, 'x', undefined, {});\n",
      { target: "ES2020", ...environment },
    );
    assert.ok(compiled.ok, compiled.output);
  });
}

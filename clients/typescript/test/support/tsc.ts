/**
 * Type-checking a consumer's code against the built package with the package's own tsc, as
 * someone who installed it would compile it.
 */

import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { PACKAGE_ROOT } from "./server.js";

const TSC = join(PACKAGE_ROOT, "node_modules", "typescript", "bin", "tsc");

/** tsc's verdict: `ok` when it found no error, `output` what it printed. */
export interface Compiled {
  ok: boolean;
  output: string;
}

/**
 * Compile `source` (a `.ts` module) with `tsc --noEmit`: strict, module NodeNext, no
 * skipLibCheck, plus `compilerOptions` (target, lib, types...).
 */
export function compileConsumer(source: string, compilerOptions: object): Compiled {
  // Inside the package (under dist/), so that "@assay/client" resolves to the built package
  // through its own name and `exports`, and the file is an ES module ("type": "module").
  const folder = mkdtempSync(join(PACKAGE_ROOT, "dist", "consumer-"));
  try {
    writeFileSync(join(folder, "consumer.ts"), source);
    const options = {
      module: "NodeNext",
      moduleResolution: "NodeNext",
      strict: true,
      noEmit: true,
      skipLibCheck: false,
      typeRoots: [join(PACKAGE_ROOT, "node_modules", "@types")],
      ...compilerOptions,
    };
    writeFileSync(
      join(folder, "tsconfig.json"),
      JSON.stringify({ compilerOptions: options, files: ["consumer.ts"] }),
    );
    const run = spawnSync(process.execPath, [TSC, "-p", folder], {
      encoding: "utf-8",
      timeout: 120_000,
    });
    return { ok: run.status === 0, output: `${run.stdout}${run.stderr}${run.error ?? ""}` };
  } finally {
    rmSync(folder, { recursive: true, force: true });
  }
}

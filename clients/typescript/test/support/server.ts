/**
 * A real `assay serve` on a free loopback port with its own SQLite file, for the tests.
 * The server runs from the repository's virtualenv (`make setup-test` creates it); set
 * ASSAY_PYTHON to use another interpreter that has `assay` installed.
 */

import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, openSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

/** The package folder (clients/typescript), from dist/test/support/. */
export const PACKAGE_ROOT = fileURLToPath(new URL("../../../", import.meta.url));
/** The repository root. */
export const REPO_ROOT = join(PACKAGE_ROOT, "..", "..");
/** The Python that runs `assay`. */
export const PYTHON = process.env["ASSAY_PYTHON"] ?? join(REPO_ROOT, ".venv", "bin", "python");

/** A port nothing listens on right now (the OS picks it). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once("error", reject);
    probe.listen(0, "127.0.0.1", () => {
      const address = probe.address();
      probe.close(() =>
        typeof address === "object" && address
          ? resolve(address.port)
          : reject(new Error("no port")),
      );
    });
  });
}

/** A running server; `stop()` ends it and removes its files. */
export interface AssayServer {
  url: string;
  stop(): Promise<void>;
}

/**
 * Start `assay serve` and resolve once `/healthz` answers.
 *
 * @param apiKeys keys the server accepts (`ASSAY_API_KEYS`).
 * @param extraArgs more `assay serve` options, e.g. ["--max-batch-items", "2"].
 * @param timeoutMs how long start-up (migrations, loading the judge) may take.
 */
export async function startServer(
  apiKeys: string[],
  extraArgs: string[] = [],
  timeoutMs = 180_000,
): Promise<AssayServer> {
  const folder = mkdtempSync(join(tmpdir(), "assay-ts-"));
  const logPath = join(folder, "server.log");
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const args = ["-m", "assay.cli", "serve", "--port", String(port), "--log-level", "warning"];
  args.push("--database-url", `sqlite:///${join(folder, "assay.db")}`, ...extraArgs);
  const log = openSync(logPath, "a");
  const child: ChildProcess = spawn(PYTHON, args, {
    env: { ...process.env, ASSAY_API_KEYS: apiKeys.join(",") },
    stdio: ["ignore", log, log],
  });
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  // Should the test process end without reaching its after() hook, take the server with it.
  const orphanGuard = () => child.kill("SIGKILL");
  process.once("exit", orphanGuard);
  void exited.then(() => process.removeListener("exit", orphanGuard));
  const tail = () => readFileSync(logPath, "utf-8").slice(-2000);
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), 30_000);
      await exited;
      clearTimeout(timer);
    }
    rmSync(folder, { recursive: true, force: true });
  };
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) {
      const message = `assay serve exited with ${child.exitCode}: ${tail()}`;
      await stop();
      throw new Error(message);
    }
    try {
      const response = await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(2000) });
      if (response.ok) return { url, stop };
    } catch {
      // Not listening yet.
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  const message = `assay serve did not answer within ${timeoutMs} ms: ${tail()}`;
  await stop();
  throw new Error(message);
}

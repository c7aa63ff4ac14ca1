/**
 * The client against a real `assay serve` (SQLite file, embedded judge): both call forms, the
 * raw inference call, async jobs, the errors the server itself produces, and the generated
 * wire types checked against the server's OpenAPI document.
 */

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import Client, {
  AuthenticationError,
  BadRequestError,
  DetectorFailedError,
  NotFoundError,
  PayloadTooLargeError,
  UnprocessableEntityError,
  detectorResult,
  isAsyncAccepted,
  type DetectorResult,
  type DetectRequestItem,
  type JobStatus,
  WIRE_FIELDS,
} from "@assay/client";

import { PACKAGE_ROOT, PYTHON, startServer, type AssayServer } from "./support/server.js";

const KEY = "live-key";
const MAX_BATCH_ITEMS = 3;
const QUESTION = "What is your return policy?";
const ANSWER = "Our return policy allows returns within 30 days of purchase.";
const POLICY = "Items may be returned within 30 days of purchase with a receipt.";
let server: AssayServer;
let client: Client;

before(async () => {
  server = await startServer([KEY], ["--max-batch-items", String(MAX_BATCH_ITEMS)]);
  client = new Client({ baseURL: server.url, authHeader: `Bearer ${KEY}`, timeout: 120_000 });
});

after(async () => {
  await server?.stop();
});

/** The checks every detector result must pass, whatever the judge decided. Its fields are
 * exactly those of the generated types: the server's actual answers are held against them. */
function assertWellFormed(result: DetectorResult, instructions: number): void {
  assert.deepEqual(Object.keys(result).sort(), [...WIRE_FIELDS.DetectorResult].sort());
  assert.equal(result.instructions_list.length, instructions);
  for (const verdict of result.instructions_list) {
    assert.deepEqual(Object.keys(verdict).sort(), [...WIRE_FIELDS.InstructionResult].sort());
    assert.equal(typeof verdict.explanation, "string");
    assert.equal(typeof verdict.instruction, "string");
    assert.equal(verdict.label, verdict.follow_probability >= 0.5);
    assert.ok(verdict.follow_probability >= 0 && verdict.follow_probability <= 1);
  }
  const labelled = result.instructions_list.filter((verdict) => verdict.label).length;
  assert.equal(result.score, labelled / instructions);
}

describe("detect", () => {
  test("the object form maps camelCase to the wire and runs every configured detector", async () => {
    const response = await client.detect({
      userQuery: QUESTION,
      generatedText: ANSWER,
      context: [POLICY],
      config: {
        output_relevance: { detector_name: "default" },
        completeness: { detector_name: "default" },
      },
      mustCompute: "all_or_none",
    });
    assert.equal(response.length, 1);
    const item = response[0]!;
    // The published lists: 4 output relevance instructions, 8 completeness ones.
    assertWellFormed(detectorResult(item, "output_relevance"), 4);
    assertWellFormed(detectorResult(item, "completeness"), 8);
    assert.equal(
      detectorResult(item, "completeness").instructions_list[0]!.instruction,
      "Response should fully address all aspects of the user query",
    );
  });

  test("the positional form sends context, query and config, and options such as publish", async () => {
    const application = "ts-positional";
    const response = await client.detect(
      ANSWER,
      POLICY,
      QUESTION,
      { output_relevance: { detector_name: "default" } },
      {
        publish: true,
        applicationName: application,
        modelName: "model-ts",
      },
    );
    assertWellFormed(detectorResult(response[0]!, "output_relevance"), 4);
    // The published detection is stored under the camelCase names' wire equivalents.
    const stored = await fetch(`${server.url}/v1/applications/${application}/detections`, {
      headers: { authorization: `Bearer ${KEY}` },
    });
    assert.equal(stored.status, 200);
    const listing = JSON.stringify(await stored.json());
    assert.match(listing, /"model-ts"/);
    assert.match(listing, /Our return policy allows returns within 30 days/);
  });

  test("inference.detect posts wire items as they are, answering in order", async () => {
    const items: DetectRequestItem[] = [
      {
        user_query: QUESTION,
        generated_text: ANSWER,
        config: { output_relevance: { detector_name: "default" } },
      },
      {
        context: POLICY,
        generated_text: "Bananas are yellow.",
        config: { completeness: { detector_name: "default" } },
      },
    ];
    const response = await client.inference.detect(items);
    assert.deepEqual(
      response.map((item) => Object.keys(item)),
      [["output_relevance"], ["completeness"]],
    );
    assertWellFormed(detectorResult(response[1]!, "completeness"), 8);
  });

  test("an async item is accepted with a job id that jobs.retrieve and jobs.wait follow", async () => {
    const [accepted] = await client.detect({
      userQuery: QUESTION,
      generatedText: ANSWER,
      config: {
        output_relevance: { detector_name: "default" },
        completeness: { detector_name: "default" },
      },
      context: POLICY,
      asyncMode: true,
      applicationName: "ts-async",
      modelName: "model-ts",
    });
    assert.ok(accepted && isAsyncAccepted(accepted), JSON.stringify(accepted));
    assert.throws(() => detectorResult(accepted, "output_relevance"), /queued as job/);
    const retrieved: JobStatus = await client.jobs.retrieve(accepted.job_id);
    assert.equal(retrieved.id, accepted.job_id);
    const job = await client.jobs.wait(accepted.job_id, { timeoutMs: 60_000, pollIntervalMs: 50 });
    assert.equal(job.id, accepted.job_id);
    assert.equal(job.state, "done", JSON.stringify(job));
    assert.equal(job.application_name, "ts-async");
    assertWellFormed(job.result!["output_relevance"] as DetectorResult, 4);
    assertWellFormed(job.result!["completeness"] as DetectorResult, 8);
  });
});

test("with no authHeader the client sends Bearer $ASSAY_API_KEY", async () => {
  const saved = process.env["ASSAY_API_KEY"];
  process.env["ASSAY_API_KEY"] = KEY;
  try {
    const fromEnvironment = new Client({ baseURL: server.url });
    const response = await fromEnvironment.detect(ANSWER, null, QUESTION, { output_relevance: {} });
    assertWellFormed(detectorResult(response[0]!, "output_relevance"), 4);
  } finally {
    if (saved === undefined) delete process.env["ASSAY_API_KEY"];
    else process.env["ASSAY_API_KEY"] = saved;
  }
});

describe("errors the server produces", () => {
  test("422 names the item and field (UnprocessableEntityError)", async () => {
    const error = await client
      .detect({ generatedText: ANSWER, config: {} })
      .catch((caught: unknown) => caught);
    assert.ok(error instanceof UnprocessableEntityError, String(error));
    assert.equal(error.status, 422);
    assert.match(error.message, /^422 \[0\]\.config/);
    assert.deepEqual(error.body, { message: error.message.slice(4), status: 422 });
  });

  test("an unknown camelCase option reaches the server renamed, and is rejected by name", async () => {
    const params = {
      generatedText: ANSWER,
      userQuery: QUESTION,
      config: { output_relevance: {} },
      explainAll: true,
    };
    await assert.rejects(client.detect(params), (error: unknown) => {
      assert.ok(error instanceof UnprocessableEntityError);
      assert.match(error.message, /explain_all/);
      return true;
    });
  });

  test("custom instructions are refused by name, not ignored", async () => {
    const params = {
      generatedText: ANSWER,
      userQuery: QUESTION,
      instructions: ["Response should mention a number of days"],
      config: { output_relevance: {} },
    };
    await assert.rejects(client.detect(params), (error: unknown) => {
      assert.ok(error instanceof UnprocessableEntityError);
      assert.match(
        error.message,
        /^422 \[0\]\.instructions: custom instructions are not supported/,
      );
      return true;
    });
  });

  test("a detector that needs a missing input is a 422 naming it", async () => {
    await assert.rejects(
      client.detect({
        generatedText: ANSWER,
        config: { completeness: { detector_name: "default" } },
      }),
      (error: unknown) =>
        error instanceof UnprocessableEntityError && /context/.test(error.message),
    );
  });

  test("a detector that fails under all_or_none is a DetectorFailedError naming it", async () => {
    // More sentences than the embedded judge reads: it refuses the item (input_too_long, 422).
    const tooLong = Array.from({ length: 1001 }, (_, n) => `Line ${n} is here.`).join(" ");
    const items: DetectRequestItem[] = [
      { generated_text: ANSWER, user_query: QUESTION, config: { output_relevance: {} } },
      { generated_text: tooLong, user_query: QUESTION, config: { output_relevance: {} } },
    ];
    await assert.rejects(client.inference.detect(items), (error: unknown) => {
      assert.ok(error instanceof DetectorFailedError, String(error));
      assert.equal(error.detector, "output_relevance");
      assert.equal(error.kind, "input_too_long");
      assert.equal(error.item, 1);
      assert.equal(error.status, 422);
      assert.match(error.message, /^\[1\]\.config\.output_relevance: .*1,001 sentences/);
      assert.match(error.body?.message ?? "", /nothing was stored/);
      return true;
    });
  });

  test("400 for a body nested too deeply (BadRequestError)", async () => {
    let nested: unknown = "deep";
    for (let level = 0; level < 40; level++) nested = [nested];
    const item = {
      generated_text: ANSWER,
      user_query: QUESTION,
      config: { output_relevance: { extra: nested } },
    };
    await assert.rejects(client.inference.detect([item as DetectRequestItem]), (error: unknown) => {
      assert.ok(error instanceof BadRequestError, String(error));
      assert.equal(error.status, 400);
      assert.match(error.message, /deep/);
      return true;
    });
  });

  test("401 without an authHeader says how to pass one (AuthenticationError)", async () => {
    delete process.env["ASSAY_API_KEY"];
    const anonymous = new Client({ baseURL: server.url });
    await assert.rejects(
      anonymous.detect(ANSWER, null, QUESTION, { output_relevance: {} }),
      (error: unknown) => {
        assert.ok(error instanceof AuthenticationError, String(error));
        assert.match(error.message, /^401 missing Authorization header/);
        assert.match(error.message, /new Client\(\{ authHeader: 'Bearer <key>' \}\)/);
        return true;
      },
    );
  });

  test("401 for a key built from an unset variable points at the variable", async () => {
    const unset = new Client({
      baseURL: server.url,
      authHeader: `Bearer ${process.env["ASSAY_TS_NO_SUCH_VARIABLE"]}`,
    });
    await assert.rejects(unset.jobs.retrieve("any"), (error: unknown) => {
      assert.ok(error instanceof AuthenticationError);
      assert.match(
        error.message,
        /^401 invalid API key.*"Bearer undefined": the variable it was built from is unset/,
      );
      return true;
    });
  });

  test("404 for an unknown job (NotFoundError)", async () => {
    await assert.rejects(client.jobs.retrieve("no-such-job"), (error: unknown) => {
      assert.ok(error instanceof NotFoundError);
      assert.equal(error.message, "404 job 'no-such-job' not found");
      return true;
    });
  });

  test("413 for a batch over the server's limit (PayloadTooLargeError)", async () => {
    const item: DetectRequestItem = {
      generated_text: ANSWER,
      user_query: QUESTION,
      config: { output_relevance: {} },
    };
    const batch = Array.from({ length: MAX_BATCH_ITEMS + 1 }, () => item);
    await assert.rejects(client.inference.detect(batch), (error: unknown) => {
      assert.ok(error instanceof PayloadTooLargeError, String(error));
      assert.match(error.message, new RegExp(`${MAX_BATCH_ITEMS}`));
      return true;
    });
  });
});

test("src/wire.ts matches the live server's OpenAPI document", () => {
  const check = spawnSync(
    PYTHON,
    [join(PACKAGE_ROOT, "scripts", "generate_types.py"), "--check", "--url", server.url],
    {
      encoding: "utf-8",
      timeout: 120_000,
    },
  );
  assert.equal(check.status, 0, check.stderr);
});

/**
 * Plain functions: the camelCase mapping, the retry policy, the error hierarchy, and option
 * checks.
 */

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, test } from "node:test";

import Client, {
  APIConnectionError,
  APIError,
  APITimeoutError,
  AssayError,
  BadRequestError,
  DEFAULT_JOB_POLL_INTERVAL_MS,
  DEFAULT_JOB_WAIT_TIMEOUT_MS,
  DetectorFailedError,
  InternalServerError,
  JobWaitTimeoutError,
  UnprocessableEntityError,
  detectorResult,
  errorForResponse,
  isRetryableStatus,
  retryAfterMs,
  retryDelayMs,
  toRequestItem,
  type JobStatus,
} from "@assay/client";

import { PACKAGE_ROOT } from "./support/server.js";

describe("toRequestItem", () => {
  test("renames top-level camelCase keys and leaves config's contents alone", () => {
    const item = toRequestItem({
      userQuery: "q",
      generatedText: "a",
      context: ["d1", "d2"],
      config: { output_relevance: { detector_name: "default", explain: true } },
      asyncMode: true,
      applicationName: "app",
      modelName: "m",
      mustCompute: "ignore_failures",
      publish: true,
      instructions: "be brief",
    });
    assert.deepEqual(item, {
      user_query: "q",
      generated_text: "a",
      context: ["d1", "d2"],
      config: { output_relevance: { detector_name: "default", explain: true } },
      async_mode: true,
      application_name: "app",
      model_name: "m",
      must_compute: "ignore_failures",
      publish: true,
      instructions: "be brief",
    });
  });

  test("drops undefined fields (the positional form's gaps) but keeps explicit nulls", () => {
    const item = toRequestItem({
      generatedText: "a",
      userQuery: undefined,
      context: null,
      config: { completeness: {} },
    });
    assert.deepEqual(item, { generated_text: "a", context: null, config: { completeness: {} } });
  });

  test("the same field in camelCase and snake_case is an error naming both keys", () => {
    assert.throws(
      () => toRequestItem({ generatedText: "x", generated_text: "", config: {} } as never),
      (error: unknown) =>
        error instanceof AssayError &&
        error.message ===
          'detect: "generatedText" and "generated_text" are the same field (generated_text); give only one',
    );
    // An undefined one is a gap, not a second value.
    assert.deepEqual(
      toRequestItem({
        userQuery: undefined,
        user_query: "q",
        generatedText: "a",
        config: {},
      } as never),
      { user_query: "q", generated_text: "a", config: {} },
    );
  });

  test("rejects a non-object with a message showing the expected shape", () => {
    assert.throws(() => toRequestItem(["a"] as never), /expected an object like \{ generatedText/);
  });
});

describe("retry policy", () => {
  test("retries busy and failing servers, not bad requests", () => {
    assert.deepEqual([400, 401, 404, 408, 409, 413, 422, 429, 500, 503].map(isRetryableStatus), [
      false,
      false,
      false,
      true,
      true,
      false,
      false,
      true,
      true,
      true,
    ]);
  });

  test("retry-after in seconds, fractions, milliseconds and as an HTTP date", () => {
    assert.equal(retryAfterMs(new Headers({ "retry-after": "1" })), 1000);
    assert.equal(retryAfterMs(new Headers({ "retry-after": "0.25" })), 250);
    assert.equal(retryAfterMs(new Headers({ "retry-after-ms": "40", "retry-after": "9" })), 40);
    const now = Date.parse("2026-01-01T00:00:00Z");
    assert.equal(
      retryAfterMs(new Headers({ "retry-after": "Thu, 01 Jan 2026 00:00:03 GMT" }), now),
      3000,
    );
  });

  test("unusable retry-after values are ignored", () => {
    for (const value of ["soon", "-1", "Infinity", ""]) {
      assert.equal(retryAfterMs(new Headers({ "retry-after": value })), undefined, value);
    }
    assert.equal(retryAfterMs(new Headers({ "retry-after-ms": "-5" })), undefined);
    assert.equal(retryAfterMs(undefined), undefined);
  });

  test("a retry-after above 60 s is cut to 60 s, not ignored (as in the Python client)", () => {
    assert.equal(retryAfterMs(new Headers({ "retry-after": "60" })), 60_000);
    assert.equal(retryAfterMs(new Headers({ "retry-after": "120" })), 60_000);
    assert.equal(retryAfterMs(new Headers({ "retry-after": "3600" })), 60_000);
    assert.equal(retryAfterMs(new Headers({ "retry-after-ms": "120000" })), 60_000);
    const now = Date.parse("2026-01-01T00:00:00Z");
    assert.equal(
      retryAfterMs(new Headers({ "retry-after": "Thu, 01 Jan 2026 00:02:00 GMT" }), now),
      60_000,
    );
    // The wait before the retry is the capped 60 s, not a short backoff (which hammers a
    // server that asked for two minutes).
    for (const retry of [0, 3]) {
      assert.equal(
        retryDelayMs(retry, new Headers({ "retry-after": "120" }), () => 0.5),
        60_000,
      );
    }
  });

  test("the server's retry-after wins over backoff", () => {
    assert.equal(
      retryDelayMs(5, new Headers({ "retry-after": "2" }), () => 0.5),
      2000,
    );
  });

  test("backoff doubles from 500 ms up to 8 s, with up to a quarter of jitter below", () => {
    const highest = [0, 1, 2, 3, 4, 5, 6].map((retry) => retryDelayMs(retry, undefined, () => 0));
    assert.deepEqual(highest, [500, 1000, 2000, 4000, 8000, 8000, 8000]);
    assert.equal(
      retryDelayMs(1, undefined, () => 0.999999),
      1000 * (1 - 0.25 * 0.999999),
    );
    const spread = new Set(Array.from({ length: 20 }, () => retryDelayMs(2, new Headers())));
    assert.ok(spread.size > 1, "jitter spreads retries out");
    for (const delay of spread) assert.ok(delay > 1500 && delay <= 2000, String(delay));
  });
});

describe("error hierarchy (as in the Python client)", () => {
  test("a 422 is an UnprocessableEntityError and also a BadRequestError", () => {
    const error = errorForResponse(
      422,
      { message: "[0].config: required", status: 422 },
      new Headers(),
    );
    assert.ok(error instanceof UnprocessableEntityError);
    assert.ok(error instanceof BadRequestError);
    assert.ok(error instanceof APIError);
    assert.equal(error.name, "UnprocessableEntityError");
    assert.equal(error.status, 422);
    // A 400 is a BadRequestError but not a 422.
    const plain = errorForResponse(400, { message: "not JSON", status: 400 }, new Headers());
    assert.ok(plain instanceof BadRequestError && !(plain instanceof UnprocessableEntityError));
    assert.equal(plain.name, "BadRequestError");
  });

  test("a body naming a failed detector is a DetectorFailedError, as in the Python client", () => {
    const failure = {
      item: 1,
      detector: "completeness",
      kind: "timeout",
      message: "judge took too long",
    };
    const body = { message: "[1].config.completeness: detector failed", status: 503, failure };
    const error = errorForResponse(503, body, new Headers());
    assert.ok(error instanceof DetectorFailedError && !(error instanceof APIError), String(error));
    assert.equal(error.name, "DetectorFailedError");
    assert.equal(error.detector, "completeness");
    assert.equal(error.kind, "timeout");
    assert.equal(error.item, 1);
    assert.equal(error.status, 503);
    assert.deepEqual(error.body, body);
    assert.equal(
      error.message,
      '[1].config.completeness: detector "completeness" failed (timeout): judge took too long',
    );
    // A failure without a usable item still names the detector.
    const noItem = errorForResponse(
      503,
      { ...body, failure: { ...failure, item: null } },
      new Headers(),
    );
    assert.ok(noItem instanceof DetectorFailedError && noItem.item === undefined);
    // A malformed failure is an ordinary error for its status.
    for (const bad of [null, "x", { ...failure, kind: 3 }, { detector: "completeness" }]) {
      const plain = errorForResponse(503, { ...body, failure: bad }, new Headers());
      assert.ok(plain instanceof InternalServerError, JSON.stringify(bad));
    }
  });

  test("no answer at all is an APIError with no status, headers or body", () => {
    const cause = new TypeError("fetch failed");
    const refused = new APIConnectionError("POST http://x/v2/detect: refused", cause);
    const silent = new APITimeoutError("POST http://x/v2/detect: no answer within 5 ms");
    for (const error of [refused, silent]) {
      assert.ok(error instanceof APIError);
      assert.ok(error instanceof AssayError);
      assert.ok(error instanceof APIConnectionError);
      assert.equal(error.status, undefined);
      assert.equal(error.headers, undefined);
      assert.equal(error.body, undefined);
    }
    assert.equal(refused.cause, cause);
    assert.equal(refused.message, "POST http://x/v2/detect: refused");
    assert.equal(refused.name, "APIConnectionError");
    assert.equal(silent.name, "APITimeoutError");
    assert.ok(!(refused instanceof APITimeoutError));
  });

  test("JobWaitTimeoutError holds the last job and the timeout, and is an AssayError", () => {
    const job: JobStatus = {
      id: "job-1",
      state: "running",
      attempts: 1,
      application_name: "app",
      model_name: "m",
      created_at: "2026-01-01T00:00:00Z",
      finished_at: null,
      result: null,
      error: null,
    };
    const error = new JobWaitTimeoutError(job, 1500);
    assert.ok(error instanceof AssayError && !(error instanceof APIError));
    assert.equal(error.job, job);
    assert.equal(error.timeoutMs, 1500);
    assert.equal(error.name, "JobWaitTimeoutError");
    assert.equal(error.message, 'job "job-1" is still running after 1500 ms');
  });
});

describe("Client options", () => {
  const saved = { ...process.env };
  afterEach(() => {
    for (const name of ["ASSAY_BASE_URL", "CLIENT_BASE_URL", "ASSAY_API_KEY"]) {
      if (saved[name] === undefined) delete process.env[name];
      else process.env[name] = saved[name];
    }
  });

  test("baseURL: the option, then $ASSAY_BASE_URL, then $CLIENT_BASE_URL, then 127.0.0.1:8000", () => {
    delete process.env["ASSAY_BASE_URL"];
    delete process.env["CLIENT_BASE_URL"];
    assert.equal(new Client().baseURL, "http://127.0.0.1:8000");
    process.env["CLIENT_BASE_URL"] = "http://client.example:8/";
    assert.equal(new Client().baseURL, "http://client.example:8");
    process.env["ASSAY_BASE_URL"] = "https://assay.example";
    assert.equal(new Client().baseURL, "https://assay.example");
    assert.equal(
      new Client({ baseURL: "http://given.example:2/api//" }).baseURL,
      "http://given.example:2/api",
    );
  });

  test("baseURL is trimmed: surrounding spaces would end up inside every request's URL", () => {
    assert.equal(
      new Client({ baseURL: "  http://given.example:2/api/ \n" }).baseURL,
      "http://given.example:2/api",
    );
    process.env["ASSAY_BASE_URL"] = " http://env.example:3 ";
    assert.equal(new Client().baseURL, "http://env.example:3");
  });

  test("a baseURL every request would fail on is refused: query, fragment, credentials, bad port", () => {
    for (const [baseURL, problem] of [
      ["http://h.example/api?x=1", /must not have a query \(\?\) or fragment/],
      ["http://h.example/?", /must not have a query/],
      ["http://h.example/#top", /or fragment \(#\)/],
      ["http://user:secret@h.example", /must not hold credentials/],
      ["http://127.0.0.1:1", /has port 1, which fetch refuses to connect to/],
      ["https://h.example:6000/", /has port 6000/],
    ] as const) {
      assert.throws(
        () => new Client({ baseURL }),
        (error: unknown) =>
          error instanceof AssayError &&
          error.message.startsWith(`baseURL: ${JSON.stringify(baseURL)} `) &&
          problem.test(error.message),
        baseURL,
      );
    }
    // Ports fetch does connect to.
    for (const port of [80, 443, 8000, 8080]) new Client({ baseURL: `http://h.example:${port}` });
  });

  test("bad options are errors naming the option", () => {
    assert.throws(
      () => new Client({ baseURL: "localhost:8000" }),
      /baseURL: "localhost:8000" must start with http/,
    );
    assert.throws(
      () => new Client({ baseURL: "not a url" }),
      /baseURL: "not a url" is not an absolute URL/,
    );
    assert.throws(
      () => new Client({ timeout: -1 }),
      /timeout: expected a number of milliseconds > 0, got -1/,
    );
    assert.throws(
      () => new Client({ maxRetries: 1.5 }),
      /maxRetries: expected a whole number >= 0, got 1.5/,
    );
    assert.throws(() => new Client({ maxRetries: Number.NaN }), AssayError);
    // Text that looks like a number is shown as text, not as the number it is not.
    assert.throws(
      () => new Client({ timeout: "5000" as never }),
      /^AssayError: timeout: expected a number of milliseconds > 0, got "5000"$/,
    );
    assert.throws(() => new Client({ maxRetries: "2" as never }), /maxRetries: .* got "2"$/);
    assert.throws(() => new Client({ maxRetries: true as never }), /maxRetries: .* got true$/);
    assert.throws(() => new Client({ timeout: 5n as never }), /timeout: .* got 5n \(a BigInt\)$/);
    // A zero timeout would fail every request; zero retries is a fine choice.
    assert.throws(() => new Client({ timeout: 0 }), /timeout: expected .* got 0/);
    assert.equal(new Client({ maxRetries: 0 }).maxRetries, 0);
  });

  test("defaults: 150 s per attempt (above the server's 120 s judging bound), 2 retries", () => {
    const client = new Client({ baseURL: "http://127.0.0.1:8" });
    assert.equal(client.timeout, 150_000);
    assert.equal(client.maxRetries, 2);
  });

  test("jobs.wait defaults are the Python client's 60 s timeout and 0.5 s poll interval", () => {
    assert.equal(DEFAULT_JOB_WAIT_TIMEOUT_MS, 60_000);
    assert.equal(DEFAULT_JOB_POLL_INTERVAL_MS, 500);
  });

  test("an auth header is trimmed, and one an HTTP header cannot carry is named, not shown", () => {
    new Client({ authHeader: "Bearer key-one\n" }); // a key read from a file: trimmed
    for (const [header, what] of [
      ["Bearer key\none", /a line break at position 10/],
      ["Bearer key-one\u200b", /the character U\+200B at position 14/],
    ] as const) {
      assert.throws(
        () => new Client({ authHeader: header }),
        (error: unknown) =>
          error instanceof AssayError &&
          what.test(error.message) &&
          error.message.startsWith("authHeader:") &&
          !error.message.includes("Bearer"),
      );
    }
  });

  test("an empty authHeader is refused, not sent empty nor replaced by $ASSAY_API_KEY", () => {
    process.env["ASSAY_API_KEY"] = "env-key";
    for (const header of ["", "  ", "\n"]) {
      assert.throws(
        () => new Client({ authHeader: header }),
        /^AssayError: authHeader: is empty; pass 'Bearer <key>', or leave it out to use \$ASSAY_API_KEY$/,
      );
    }
  });
});

describe("detectorResult", () => {
  test("returns a result, throws DetectorFailedError for an error object, and names what is present", () => {
    const result = { instructions_list: [], score: 0.5 };
    const item = {
      output_relevance: result,
      completeness: { error: true as const, kind: "timeout", message: "judge took too long" },
    };
    assert.equal(detectorResult(item, "output_relevance"), result);
    assert.throws(
      () => detectorResult(item, "completeness"),
      (error: unknown) => {
        assert.ok(error instanceof DetectorFailedError);
        assert.equal(error.kind, "timeout");
        assert.equal(
          error.message,
          'detector "completeness" failed (timeout): judge took too long',
        );
        return true;
      },
    );
    assert.throws(
      () => detectorResult(item, "toxicity"),
      /no result for detector "toxicity" \(present: output_relevance, completeness\)/,
    );
  });
});

test("engines.node admits no Node without AbortSignal.any (added in 20.3), in the lockfile too", () => {
  const read = (name: string) => JSON.parse(readFileSync(join(PACKAGE_ROOT, name), "utf-8"));
  const wanted: string = read("package.json").engines.node;
  const [major, minor] = (/^>=(\d+)\.(\d+)/.exec(wanted) ?? []).slice(1).map(Number);
  assert.ok(major! > 20 || (major === 20 && minor! >= 3), wanted);
  assert.equal(read("package-lock.json").packages[""].engines.node, wanted);
  // The suite itself runs on such a Node.
  assert.equal(typeof AbortSignal.any, "function");
});

/**
 * Retries, timeouts and error classes, against loopback stubs that misbehave on purpose.
 */

import assert from "node:assert/strict";
import { afterEach, describe, test } from "node:test";

import Client, {
  APIConnectionError,
  APITimeoutError,
  AssayError,
  BadRequestError,
  ConflictError,
  InternalServerError,
  RateLimitError,
  RequestTimeoutError,
  UnprocessableEntityError,
  type APIError,
} from "@assay/client";

import { freePort } from "./support/server.js";
import { sendJSON, startStub, type Stub, type StubHandler } from "./support/stub.js";

const RESULT = [{ output_relevance: { instructions_list: [], score: 1 } }];
const PARAMS = {
  userQuery: "q?",
  generatedText: "a.",
  config: { output_relevance: { detector_name: "default" } },
};
let stub: Stub | undefined;

afterEach(async () => {
  await stub?.close();
  stub = undefined;
});

async function clientFor(
  handler: StubHandler,
  options: { maxRetries?: number; timeout?: number } = {},
): Promise<Client> {
  stub = await startStub(handler);
  return new Client({ baseURL: stub.url, authHeader: "Bearer stub-key", ...options });
}

/** Fail the first `failures` requests with `status` (retry-after 0), then answer RESULT. */
function failingThenOK(failures: number, status: number, message = "try again"): StubHandler {
  return (index, _request, response) => {
    if (index < failures) sendJSON(response, status, { message, status }, { "retry-after": "0" });
    else sendJSON(response, 200, RESULT);
  };
}

describe("retries", () => {
  test("a 429 once, then success: the client retries and returns the result", async () => {
    const client = await clientFor(failingThenOK(1, 429, "server is busy"));
    assert.deepEqual(await client.detect(PARAMS), RESULT);
    assert.equal(stub!.received.length, 2);
    // The retry is the same request: same body, same key.
    assert.equal(stub!.received[1]!.body, stub!.received[0]!.body);
    assert.deepEqual(JSON.parse(stub!.received[0]!.body), [
      {
        user_query: "q?",
        generated_text: "a.",
        config: { output_relevance: { detector_name: "default" } },
      },
    ]);
    assert.equal(stub!.received[1]!.headers.authorization, "Bearer stub-key");
  });

  for (const status of [408, 409, 500, 502, 503, 504]) {
    test(`${status} is retried`, async () => {
      const client = await clientFor(failingThenOK(2, status));
      assert.deepEqual(await client.inference.detect([]), RESULT);
      assert.equal(stub!.received.length, 3);
    });
  }

  test("a 429 that persists ends in RateLimitError with the server's message, after maxRetries", async () => {
    const client = await clientFor(
      failingThenOK(Infinity, 429, "server is busy (1 requests in flight)"),
      { maxRetries: 3 },
    );
    await assert.rejects(client.detect(PARAMS), (error: unknown) => {
      assert.ok(error instanceof RateLimitError);
      assert.equal(error.status, 429);
      assert.equal(error.message, "429 server is busy (1 requests in flight)");
      assert.equal(error.headers.get("retry-after"), "0");
      return true;
    });
    assert.equal(stub!.received.length, 4);
  });

  test("maxRetries: 0 per request overrides the client's setting", async () => {
    const client = await clientFor(failingThenOK(1, 503, "detector 'completeness' failed"));
    await assert.rejects(client.inference.detect([], { maxRetries: 0 }), InternalServerError);
    assert.equal(stub!.received.length, 1);
  });

  test("a reset connection is retried like a busy server", async () => {
    const client = await clientFor((index, _request, response) => {
      if (index === 0) response.socket?.destroy();
      else sendJSON(response, 200, RESULT);
    });
    assert.deepEqual(await client.detect(PARAMS), RESULT);
    assert.equal(stub!.received.length, 2);
  });

  for (const [status, ErrorClass] of [
    [400, BadRequestError],
    [422, UnprocessableEntityError],
  ] as const) {
    test(`${status} is not retried: the request itself is wrong`, async () => {
      const client = await clientFor(
        failingThenOK(Infinity, status, "[0].generated_text: must not be empty"),
      );
      await assert.rejects(client.detect(PARAMS), ErrorClass);
      assert.equal(stub!.received.length, 1);
    });
  }
});

describe("error classes", () => {
  const cases: [number, new (...args: never[]) => APIError][] = [
    [408, RequestTimeoutError],
    [409, ConflictError],
    [500, InternalServerError],
    [503, InternalServerError],
  ];
  for (const [status, ErrorClass] of cases) {
    test(`${status} becomes ${ErrorClass.name} carrying the server's message`, async () => {
      const client = await clientFor(failingThenOK(Infinity, status, `failure ${status}`), {
        maxRetries: 0,
      });
      await assert.rejects(client.detect(PARAMS), (error: unknown) => {
        assert.ok(error instanceof ErrorClass);
        assert.equal(error.status, status);
        assert.equal(error.message, `${status} failure ${status}`);
        return true;
      });
    });
  }

  test("an error page that is not JSON keeps its text as the message", async () => {
    const client = await clientFor(
      (_index, _request, response) => {
        response.writeHead(502, { "content-type": "text/html" });
        response.end("<h1>Bad gateway</h1>");
      },
      { maxRetries: 0 },
    );
    await assert.rejects(client.detect(PARAMS), (error: unknown) => {
      assert.ok(error instanceof InternalServerError);
      assert.equal(error.message, "502 <h1>Bad gateway</h1>");
      return true;
    });
  });

  test("a success whose body is not JSON is an AssayError, not a result", async () => {
    const client = await clientFor((_index, _request, response) => {
      response.writeHead(200, { "content-type": "text/plain" });
      response.end("ok");
    });
    await assert.rejects(client.detect(PARAMS), (error: unknown) => {
      assert.ok(error instanceof AssayError && !(error instanceof APIConnectionError));
      assert.match(error.message, /not JSON/);
      return true;
    });
  });
});

describe("timeouts and connection errors", () => {
  test("a server that never answers ends each attempt at the timeout: APITimeoutError", async () => {
    const client = await clientFor(
      () => {
        // Never answer.
      },
      { timeout: 200, maxRetries: 1 },
    );
    await assert.rejects(client.detect(PARAMS), (error: unknown) => {
      assert.ok(error instanceof APITimeoutError);
      assert.match(error.message, /no answer within 200 ms/);
      return true;
    });
    assert.equal(stub!.received.length, 2);
  });

  test("nothing listening: APIConnectionError naming the URL and the cause", async () => {
    const port = await freePort();
    const client = new Client({ baseURL: `http://127.0.0.1:${port}`, maxRetries: 1 });
    await assert.rejects(client.detect(PARAMS), (error: unknown) => {
      assert.ok(error instanceof APIConnectionError && !(error instanceof APITimeoutError));
      assert.match(
        error.message,
        new RegExp(`POST http://127.0.0.1:${port}/v2/detect: .*ECONNREFUSED`),
      );
      return true;
    });
  });

  test("the caller's abort signal cancels at once and is not retried", async () => {
    const controller = new AbortController();
    const client = await clientFor((index, _request, response) => {
      if (index === 0) controller.abort(new Error("caller gave up"));
      // Never answer: only the abort can end the request.
      void response;
    });
    await assert.rejects(
      client.inference.detect([], { signal: controller.signal }),
      /caller gave up/,
    );
    assert.equal(stub!.received.length, 1);
  });
});

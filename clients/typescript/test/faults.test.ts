/**
 * Retries, timeouts, error classes and `jobs.wait`'s polling, against loopback stubs that
 * misbehave on purpose.
 */

import assert from "node:assert/strict";
import { afterEach, describe, test } from "node:test";

import Client, {
  APIConnectionError,
  APIError,
  APITimeoutError,
  AssayError,
  BadRequestError,
  ConflictError,
  DetectorFailedError,
  InternalServerError,
  JobWaitTimeoutError,
  NotFoundError,
  PayloadTooLargeError,
  RateLimitError,
  RequestTimeoutError,
  UnprocessableEntityError,
  type JobStatus,
} from "@assay/client";

import { freePort } from "./support/server.js";
import { sendJSON, startStub, type Stub, type StubHandler } from "./support/stub.js";

const RESULT = [{ output_relevance: { instructions_list: [], score: 1 } }];
const PARAMS = {
  userQuery: "q?",
  generatedText: "a.",
  config: { output_relevance: { detector_name: "default" } },
};
/** PARAMS on the wire, for `inference.detect`. */
const ITEM = {
  user_query: "q?",
  generated_text: "a.",
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
      assert.deepEqual(await client.inference.detect([ITEM]), RESULT);
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
      assert.equal(error.headers?.get("retry-after"), "0");
      return true;
    });
    assert.equal(stub!.received.length, 4);
  });

  test("maxRetries: 0 per request overrides the client's setting", async () => {
    const client = await clientFor(failingThenOK(1, 503, "detector 'completeness' failed"));
    await assert.rejects(client.inference.detect([], { maxRetries: 0 }), InternalServerError);
    assert.equal(stub!.received.length, 1);
  });

  for (const [status, kind] of [
    [503, "timeout"],
    [422, "input_too_long"],
  ] as const) {
    test(`a ${status} naming a failed detector (${kind}) is a DetectorFailedError, never retried`, async () => {
      const failure = { item: 0, detector: "completeness", kind, message: "judge gave up" };
      const body = { message: "[0].config.completeness: detector failed", status, failure };
      const client = await clientFor((_index, _request, response) =>
        sendJSON(response, status, body, { "retry-after": "0" }),
      );
      await assert.rejects(client.detect(PARAMS), (error: unknown) => {
        assert.ok(error instanceof DetectorFailedError, String(error));
        assert.equal(error.detector, "completeness");
        assert.equal(error.kind, kind);
        assert.equal(error.item, 0);
        assert.equal(error.status, status);
        assert.deepEqual(error.body, body);
        return true;
      });
      // The server retried its judge already: a second request would judge the item again.
      assert.equal(stub!.received.length, 1);
    });
  }

  test("a 503 whose failure is malformed is an ordinary 503, retried", async () => {
    const client = await clientFor((index, _request, response) => {
      const failure = { item: 0, detector: "completeness" }; // no kind or message
      if (index === 0) sendJSON(response, 503, { message: "x", status: 503, failure });
      else sendJSON(response, 200, RESULT);
    });
    assert.deepEqual(await client.detect(PARAMS), RESULT);
    assert.equal(stub!.received.length, 2);
  });

  test("a reset connection is retried like a busy server", async () => {
    const client = await clientFor((index, _request, response) => {
      if (index === 0) response.socket?.destroy();
      else sendJSON(response, 200, RESULT);
    });
    assert.deepEqual(await client.detect(PARAMS), RESULT);
    assert.equal(stub!.received.length, 2);
  });

  test("connections reset every time: retried maxRetries times, then an APIError with no status", async () => {
    const client = await clientFor(
      (_index, _request, response) => {
        response.socket?.destroy();
      },
      { maxRetries: 2 },
    );
    await assert.rejects(client.detect(PARAMS), (error: unknown) => {
      assert.ok(error instanceof APIConnectionError, String(error));
      assert.ok(error instanceof APIError);
      assert.equal(error.status, undefined);
      assert.equal(error.headers, undefined);
      return true;
    });
    assert.equal(stub!.received.length, 3);
  });

  test("a retry-after above 60 s is waited out (cut to 60 s), not replaced by quick backoff", async () => {
    const client = await clientFor((_index, _request, response) => {
      sendJSON(response, 429, { message: "busy", status: 429 }, { "retry-after": "120" });
    });
    // Backoff (what an over-long retry-after used to fall back to) retries within 0.5 s; the
    // capped 60 s wait sends nothing more within the second.
    const signal = AbortSignal.timeout(1000);
    await assert.rejects(
      client.inference.detect([], { signal }),
      (error: unknown) => error instanceof DOMException && error.name === "TimeoutError",
    );
    assert.equal(stub!.received.length, 1);
  });

  for (const [status, ErrorClass] of [
    [400, BadRequestError],
    [404, NotFoundError],
    [413, PayloadTooLargeError],
    [422, UnprocessableEntityError],
  ] as const) {
    test(`${status} is not retried: the request itself is wrong`, async () => {
      const client = await clientFor(
        failingThenOK(Infinity, status, "[0].generated_text: must not be empty"),
      );
      await assert.rejects(client.detect(PARAMS), (error: unknown) => {
        assert.ok(error instanceof ErrorClass, String(error));
        assert.equal(error.name, ErrorClass.name);
        assert.equal(error.status, status);
        return true;
      });
      assert.equal(stub!.received.length, 1);
    });
  }

  test("a 422 is also a BadRequestError, as in the Python client", async () => {
    const client = await clientFor(failingThenOK(Infinity, 422, "[0].config: required"));
    await assert.rejects(client.detect(PARAMS), (error: unknown) => {
      assert.ok(error instanceof BadRequestError, String(error));
      assert.ok(error instanceof UnprocessableEntityError);
      assert.equal(error.name, "UnprocessableEntityError");
      assert.equal(error.message, "422 [0].config: required");
      return true;
    });
    assert.equal(stub!.received.length, 1);
  });
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

  test("a success whose body is not JSON is an APIError with the status and text, not a result", async () => {
    const client = await clientFor((_index, _request, response) => {
      response.writeHead(200, { "content-type": "text/plain" });
      response.end("ok");
    });
    await assert.rejects(client.detect(PARAMS), (error: unknown) => {
      assert.ok(error instanceof APIError && !(error instanceof APIConnectionError));
      assert.equal(error.status, 200);
      assert.equal(error.body, "ok");
      assert.match(error.message, /answered 200 with a body that is not JSON/);
      return true;
    });
  });

  test("a success of the wrong shape is an APIError; one object is read as a list of one", async () => {
    const answers: unknown[] = ["text", [1, 2], null, { hello: 1 }];
    const client = await clientFor((index, _request, response) =>
      sendJSON(response, 200, answers[index]),
    );
    for (const _ of [0, 1, 2]) {
      await assert.rejects(client.detect(PARAMS), (error: unknown) => {
        assert.ok(error instanceof APIError && error.status === 200, String(error));
        assert.match(error.message, /something other than a JSON array of objects/);
        return true;
      });
    }
    // As the Python client reads it: an object is one response item.
    assert.deepEqual(await client.detect(PARAMS), [{ hello: 1 }]);
  });

  test("a detect answer with more or fewer items than were sent is an APIError saying so", async () => {
    const answers: unknown[] = [[], [RESULT[0], RESULT[0]], RESULT[0]];
    const client = await clientFor((index, _request, response) =>
      sendJSON(response, 200, answers[index]),
    );
    for (const [sent, got] of [
      [1, 0],
      [1, 2],
    ]) {
      await assert.rejects(client.detect(PARAMS), (error: unknown) => {
        assert.ok(error instanceof APIError && error.status === 200, String(error));
        assert.match(
          error.message,
          new RegExp(`answered 200 with ${got} item\\(s\\) for the ${sent} item`),
        );
        assert.deepEqual(error.body, answers[stub!.received.length - 1]);
        return true;
      });
    }
    // One object for two items sent is short too.
    await assert.rejects(
      client.inference.detect([ITEM, ITEM]),
      /with 1 item\(s\) for the 2 item\(s\) sent/,
    );
    // Not retried: the server did answer, and again it would answer the same.
    assert.equal(stub!.received.length, 3);
  });

  test("a job that is not a job is an APIError, not a wait until the timeout", async () => {
    const client = await clientFor((_index, _request, response) =>
      sendJSON(response, 200, { hello: 1 }),
    );
    await assert.rejects(client.jobs.wait("job/1"), (error: unknown) => {
      assert.ok(error instanceof APIError && error.status === 200, String(error));
      assert.match(error.message, /not a job|other than a job/);
      return true;
    });
    assert.equal(stub!.received.length, 1);
  });

  test("bad arguments are rejected promises holding AssayErrors, and nothing is sent", async () => {
    const client = await clientFor((_index, _request, response) => sendJSON(response, 200, RESULT));
    const calls: [() => Promise<unknown>, RegExp][] = [
      [() => client.detect(null as never), /^detect: expected an object .* got null$/],
      [() => client.detect({ ...PARAMS, extra: 1n } as never), /^body: cannot be sent as JSON/],
      [
        () => client.jobs.retrieve(undefined as never),
        /^jobId: expected the job_id text .* got undefined$/,
      ],
      [() => client.jobs.wait(""), /^jobId: .* got ""$/],
      [() => client.jobs.retrieve("\ud800"), /^jobId: holds a lone surrogate/],
      [
        () => client.inference.detect([], { maxRetries: Number.NaN }),
        /^maxRetries: expected a whole number >= 0, got NaN$/,
      ],
      [() => client.inference.detect([], { maxRetries: 1.5 }), /^maxRetries: .* got 1.5$/],
      [
        () => client.inference.detect([], { timeout: Number.NaN }),
        /^timeout: expected a number of milliseconds > 0, got NaN$/,
      ],
      [() => client.inference.detect([], { timeout: 0 }), /^timeout: .* got 0$/],
      [() => client.inference.detect([], { timeout: Infinity }), /^timeout: .* got Infinity$/],
    ];
    for (const [call, pattern] of calls) {
      let promise: Promise<unknown> | undefined;
      assert.doesNotThrow(() => {
        promise = call();
      });
      await assert.rejects(promise!, (error: unknown) => {
        assert.ok(error instanceof AssayError && !(error instanceof APIError), String(error));
        assert.match(error.message, pattern);
        return true;
      });
    }
    assert.equal(stub!.received.length, 0);
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
      assert.ok(error instanceof APIError);
      assert.equal(error.status, undefined);
      assert.match(error.message, /no answer within 200 ms/);
      return true;
    });
    assert.equal(stub!.received.length, 2);
  });

  test("a timeout beyond the longest timer (about 24.8 days) waits for the answer", async () => {
    // setTimeout fires at once for a longer delay: every attempt failed in a millisecond
    // while the server still scored (and stored) each one.
    const client = await clientFor(
      (_index, _request, response) => {
        setTimeout(() => sendJSON(response, 200, RESULT), 50);
      },
      { timeout: 30 * 24 * 3600 * 1000 },
    );
    assert.deepEqual(await client.detect(PARAMS), RESULT);
    assert.equal(stub!.received.length, 1);
  });

  test("a baseURL with surrounding spaces reaches the server", async () => {
    stub = await startStub((_index, _request, response) => sendJSON(response, 200, RESULT));
    const client = new Client({ baseURL: ` ${stub.url} `, maxRetries: 0 });
    assert.deepEqual(await client.detect(PARAMS), RESULT);
    assert.equal(stub.received[0]!.path, "/v2/detect");
  });

  test("nothing listening: APIConnectionError naming the URL and the cause", async () => {
    const port = await freePort();
    const client = new Client({ baseURL: `http://127.0.0.1:${port}`, maxRetries: 1 });
    await assert.rejects(client.detect(PARAMS), (error: unknown) => {
      assert.ok(error instanceof APIConnectionError && !(error instanceof APITimeoutError));
      assert.ok(error instanceof APIError);
      assert.equal(error.status, undefined);
      assert.equal(error.headers, undefined);
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

describe("jobs.wait", () => {
  /** A job in `state`; `attempts` tells one poll's answer from another. */
  function job(state: JobStatus["state"], attempts: number): JobStatus {
    return {
      id: "job/1",
      state,
      attempts,
      application_name: "app",
      model_name: "m",
      created_at: "2026-01-01T00:00:00Z",
      finished_at: state === "done" || state === "failed" ? "2026-01-01T00:00:01Z" : null,
      result: state === "done" ? { output_relevance: { instructions_list: [], score: 1 } } : null,
      error: state === "failed" ? "judge failed" : null,
    };
  }

  /** Answer poll number `index` with `states[index]` (the last one once they run out). */
  function jobStates(...states: JobStatus["state"][]) {
    return (index: number, _request: unknown, response: Parameters<typeof sendJSON>[0]) =>
      sendJSON(response, 200, job(states[Math.min(index, states.length - 1)]!, index));
  }

  /**
   * One request before a timed wait: a process's first fetch takes ~100 ms (loading undici),
   * which would leave a short wait no time for its second poll. The stub counts it as well.
   */
  async function warmUp(client: Client) {
    await client.jobs.retrieve("job/1");
  }

  test("polls until the job is done and returns it", async () => {
    const client = await clientFor(jobStates("queued", "running", "done"));
    const done = await client.jobs.wait("job/1", { pollIntervalMs: 10 });
    assert.deepEqual(done, job("done", 2));
    assert.equal(stub!.received.length, 3);
    for (const request of stub!.received) {
      assert.equal(request.method, "GET");
      assert.equal(request.path, "/v1/jobs/job%2F1");
    }
  });

  test("a failed job is returned, not thrown: it is finished too", async () => {
    const client = await clientFor(jobStates("running", "failed", "done"));
    const failed = await client.jobs.wait("job/1", { pollIntervalMs: 10 });
    assert.equal(failed.state, "failed");
    assert.equal(failed.error, "judge failed");
    assert.equal(stub!.received.length, 2);
  });

  test("polls every 500 ms by default: a 200 ms wait polls at its start and its end only", async () => {
    const client = await clientFor(jobStates("running"));
    await warmUp(client);
    await assert.rejects(client.jobs.wait("job/1", { timeoutMs: 200 }), JobWaitTimeoutError);
    assert.equal(stub!.received.length - 1, 2);
  });

  test("a last pause whose timer fires early ends the wait all the same: no extra poll", async () => {
    const client = await clientFor(jobStates("running"));
    await warmUp(client);
    // Node's timers can end a little early by performance.now(); 10 ms early makes the sliver
    // left at the "end" far longer than a loopback poll, so an extra poll would always show.
    const realSetTimeout = globalThis.setTimeout;
    const early = ((callback: () => void, ms?: number) =>
      realSetTimeout(callback, Math.max(0, (ms ?? 0) - 10))) as typeof setTimeout;
    globalThis.setTimeout = early;
    try {
      await assert.rejects(client.jobs.wait("job/1", { timeoutMs: 100 }), JobWaitTimeoutError);
    } finally {
      globalThis.setTimeout = realSetTimeout;
    }
    assert.equal(stub!.received.length - 1, 2);
  });

  test("a job still running at the timeout: JobWaitTimeoutError holding the last job seen", async () => {
    const client = await clientFor(jobStates("queued", "running"));
    await assert.rejects(
      client.jobs.wait("job/1", { timeoutMs: 200, pollIntervalMs: 30 }),
      (error: unknown) => {
        assert.ok(error instanceof JobWaitTimeoutError, String(error));
        assert.ok(error instanceof AssayError);
        assert.equal(error.timeoutMs, 200);
        // The last poll's answer, not the first.
        assert.deepEqual(error.job, job("running", stub!.received.length - 1));
        assert.equal(error.message, 'job "job/1" is still running after 200 ms');
        return true;
      },
    );
    assert.ok(stub!.received.length >= 3, String(stub!.received.length));
  });

  test("the last pause is cut to the time left, not a whole poll interval", async () => {
    const client = await clientFor(jobStates("running"));
    await assert.rejects(
      client.jobs.wait("job/1", { timeoutMs: 150, pollIntervalMs: 5_000 }),
      JobWaitTimeoutError,
    );
    // One poll at the start, one when the time ran out.
    assert.equal(stub!.received.length, 2);
  });

  test("bad options are AssayErrors naming the option, and nothing is sent", async () => {
    const client = await clientFor(jobStates("done"));
    for (const [options, pattern] of [
      [{ timeoutMs: 0 }, /^timeoutMs: expected a number of milliseconds > 0, got 0$/],
      [{ timeoutMs: -5 }, /^timeoutMs: .* got -5$/],
      [{ timeoutMs: Number.NaN }, /^timeoutMs: .* got NaN$/],
      [{ pollIntervalMs: 0 }, /^pollIntervalMs: expected a number of milliseconds > 0, got 0$/],
      [{ pollIntervalMs: Number.NaN }, /^pollIntervalMs: .* got NaN$/],
      [{ pollIntervalMs: "1" as unknown as number }, /^pollIntervalMs: .* got "1"$/],
      [{ timeoutMs: "5000" as unknown as number }, /^timeoutMs: .* got "5000"$/],
    ] as const) {
      await assert.rejects(client.jobs.wait("job/1", options), (error: unknown) => {
        assert.ok(error instanceof AssayError, String(error));
        assert.match(error.message, pattern);
        return true;
      });
    }
    assert.equal(stub!.received.length, 0);
  });

  test("an unknown job: the NotFoundError from retrieve, at once", async () => {
    const client = await clientFor(failingThenOK(Infinity, 404, "no job job/1"));
    await assert.rejects(client.jobs.wait("job/1", { pollIntervalMs: 10 }), NotFoundError);
    assert.equal(stub!.received.length, 1);
  });

  test("a poll the server does not answer ends with the wait, not after the request timeouts", async () => {
    // The client's timeout is a minute with two retries; the wait is 300 ms (plus the poll's
    // 1 s grace). Before, the wait lasted three whole request timeouts.
    for (const answersFirst of [false, true]) {
      const client = await clientFor(
        (index, _request, response) => {
          if (answersFirst && index === 0) sendJSON(response, 200, job("running", 0));
          // Otherwise never answer.
        },
        { timeout: 60_000, maxRetries: 2 },
      );
      await assert.rejects(
        client.jobs.wait("job/1", { timeoutMs: 300, pollIntervalMs: 50 }),
        (error: unknown) => {
          if (answersFirst) {
            assert.ok(error instanceof JobWaitTimeoutError, String(error));
            assert.equal(error.job.state, "running");
          } else {
            assert.ok(error instanceof APITimeoutError, String(error));
            assert.equal(
              error.message,
              'job "job/1": the server did not answer within the wait\'s 300 ms',
            );
          }
          return true;
        },
      );
      await stub?.close();
      stub = undefined;
    }
  });

  test("the signal aborts the pause between polls", async () => {
    const client = await clientFor(jobStates("running"));
    const controller = new AbortController();
    setTimeout(() => controller.abort(new Error("caller gave up")), 100);
    // A 60 s pause: only the abort can end the wait within the test's time.
    await assert.rejects(
      client.jobs.wait("job/1", { pollIntervalMs: 60_000, signal: controller.signal }),
      /caller gave up/,
    );
    assert.equal(stub!.received.length, 1);
  });
});

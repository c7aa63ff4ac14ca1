/**
 * `Client`: the Assay server's API in TypeScript, shaped like AIMon's client so that its
 * published snippets run against Assay with only the import line changed.
 */

import { APITimeoutError, AssayError, JobWaitTimeoutError } from "./errors.js";
import {
  toRequestItem,
  type DetectConfig,
  type DetectOptions,
  type DetectParams,
} from "./params.js";
import type { JobStatus } from "./jobs.js";
import type { DetectResponseItem } from "./results.js";
import {
  checkedOption,
  MAX_TIMER_MS,
  requestJSON,
  shown,
  sleep,
  type RequestOptions,
  type ShapeCheck,
  type Transport,
} from "./transport.js";
import type { DetectRequestItem } from "./wire.js";

/** Where the client looks for the server when `baseURL` is not given. */
export const DEFAULT_BASE_URL = "http://127.0.0.1:8000";
/**
 * Milliseconds each attempt may take by default: above a server's default bound on judging one
 * request (120 s), so a slow judge answers before the client gives up and sends the request
 * again (which judges it, and with `publish` stores it, a second time).
 */
export const DEFAULT_TIMEOUT_MS = 150_000;
/** Retries after the first attempt by default. */
export const DEFAULT_MAX_RETRIES = 2;
/** How long `jobs.wait` waits in all by default, in milliseconds (the Python client's 60 s). */
export const DEFAULT_JOB_WAIT_TIMEOUT_MS = 60_000;
/** Milliseconds between `jobs.wait`'s polls by default (the Python client's 0.5 s). */
export const DEFAULT_JOB_POLL_INTERVAL_MS = 500;
/** How long a poll of `jobs.wait` may run past the wait's end (the Python client's 1 s). */
export const JOB_POLL_GRACE_MS = 1_000;

/** Options of `client.jobs.wait`. */
export interface JobWaitOptions {
  /** Milliseconds to wait in all before `JobWaitTimeoutError` (default 60000). */
  timeoutMs?: number;
  /** Milliseconds between polls (default 500). */
  pollIntervalMs?: number;
  /** Aborts the wait (a poll in flight, or the pause between polls) when signalled. */
  signal?: AbortSignal;
}

/** How to reach the server. */
export interface ClientOptions {
  /** `Authorization` header value, e.g. `Bearer <key>`; default `Bearer $ASSAY_API_KEY` when
   * that is set, else none (fine for a server run with `--no-auth`). An empty one is refused. */
  authHeader?: string;
  /** Server root; default `$ASSAY_BASE_URL`, then `$CLIENT_BASE_URL`, then
   * `http://127.0.0.1:8000`. Refused when it has a query or fragment, credentials, or a port
   * `fetch` will not connect to. */
  baseURL?: string;
  /** Milliseconds each attempt may take (default 150000). */
  timeout?: number;
  /** Retries on 408/409/429/5xx, timeouts and connection errors (default 2). */
  maxRetries?: number;
}

function environment(name: string): string | undefined {
  const value = typeof process === "undefined" ? undefined : process.env[name];
  return value?.trim() ? value.trim() : undefined;
}

/**
 * Ports `fetch` refuses to connect to (the Fetch Standard's "bad ports", as undici lists them):
 * refused in the constructor, since every request to one would fail.
 */
const BAD_PORTS = new Set([
  1, 7, 9, 11, 13, 15, 17, 19, 20, 21, 22, 23, 25, 37, 42, 43, 53, 69, 77, 79, 87, 95, 101, 102,
  103, 104, 109, 110, 111, 113, 115, 117, 119, 123, 135, 137, 139, 143, 161, 179, 389, 427, 465,
  512, 513, 514, 515, 526, 530, 531, 532, 540, 548, 554, 556, 563, 587, 601, 636, 989, 990, 993,
  995, 1719, 1720, 1723, 2049, 3659, 4045, 4190, 5060, 5061, 6000, 6566, 6665, 6666, 6667, 6668,
  6669, 6679, 6697, 10080,
]);

/**
 * The server root without surrounding whitespace or trailing slashes; an AssayError for one
 * that every request would fail on (`fetch` refuses it, or the paths would land in its query).
 */
function checkedBaseURL(value: string): string {
  const trimmed = String(value).trim();
  const fail = (problem: string) => new AssayError(`baseURL: ${JSON.stringify(value)} ${problem}`);
  let url: URL;
  try {
    url = new URL(trimmed);
  } catch {
    throw fail("is not an absolute URL");
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw fail("must start with http:// or https://");
  }
  // Checked on the text: `new URL("http://h/?").search` is empty, yet the paths would follow
  // the "?".
  if (trimmed.includes("?") || trimmed.includes("#")) {
    throw fail("must not have a query (?) or fragment (#): request paths are appended to it");
  }
  if (url.username !== "" || url.password !== "") {
    throw fail("must not hold credentials (fetch refuses them): pass the key as authHeader");
  }
  if (BAD_PORTS.has(Number(url.port))) {
    throw fail(`has port ${url.port}, which fetch refuses to connect to`);
  }
  return trimmed.replace(/\/+$/, "");
}

/**
 * `header` without surrounding whitespace (a key read from a file keeps its newline); an
 * AssayError naming the first character an HTTP header cannot carry, without echoing the secret.
 */
function checkedAuthHeader(header: string | undefined): string | undefined {
  if (header === undefined) {
    return undefined;
  }
  const trimmed = String(header).trim();
  // Refused rather than sent empty or swapped for $ASSAY_API_KEY: as in the Python client, only
  // an absent header falls back to the environment.
  if (trimmed === "") {
    throw new AssayError(
      "authHeader: is empty; pass 'Bearer <key>', or leave it out to use $ASSAY_API_KEY",
    );
  }
  for (let position = 0; position < trimmed.length; position++) {
    const code = trimmed.charCodeAt(position);
    if (!((code >= 0x20 && code <= 0x7e) || code === 0x09)) {
      const what =
        code === 0x0a || code === 0x0d
          ? "a line break"
          : `the character U+${code.toString(16).toUpperCase().padStart(4, "0")}`;
      throw new AssayError(
        `authHeader: has ${what} at position ${position} (the header is not shown: it holds a ` +
          "secret); check authHeader or ASSAY_API_KEY",
      );
    }
  }
  return trimmed;
}

/** `value` if it is a number above zero (Infinity included: wait without end); NaN is not. */
function checkedWaitOption(name: "timeoutMs" | "pollIntervalMs", value: number): number {
  if (!(typeof value === "number" && value > 0)) {
    throw new AssayError(`${name}: expected a number of milliseconds > 0, got ${shown(value)}`);
  }
  return value;
}

/** Advice added to a 401, depending on what the client sent. */
function authHint(authHeader: string | undefined): string {
  if (authHeader === undefined) {
    return " (this client sent no Authorization header: pass new Client({ authHeader: 'Bearer <key>' }) or set ASSAY_API_KEY)";
  }
  if (/\b(undefined|null)$/.test(authHeader.trim())) {
    return ` (authHeader is ${JSON.stringify(authHeader)}: the variable it was built from is unset)`;
  }
  return "";
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/**
 * `/v2/detect` answers a list of objects, one per item sent (a single object is read as a list
 * of one): a caller indexing a shorter answer would fail far from here.
 */
function detectAnswer(sent: number): ShapeCheck {
  return (json) => {
    const items = isObject(json) ? [json] : json;
    if (!Array.isArray(items) || !items.every(isObject)) {
      return "something other than a JSON array of objects";
    }
    return items.length === sent
      ? undefined
      : `${items.length} item(s) for the ${sent} item(s) sent`;
  };
}

/** A job is an object whose `state` is text. */
const jobAnswer: ShapeCheck = (json) =>
  isObject(json) && typeof json["state"] === "string"
    ? undefined
    : "something other than a job (a JSON object with a state)";

/** The URL path of a job: an AssayError for a missing id (it would fetch `/v1/jobs/`) or one
 * no URL can carry (a lone surrogate). */
function jobPath(jobId: unknown): string {
  if (typeof jobId !== "string" || jobId === "") {
    const got = typeof jobId === "string" ? '""' : String(jobId);
    throw new AssayError(`jobId: expected the job_id text a detect call returned, got ${got}`);
  }
  try {
    return `/v1/jobs/${encodeURIComponent(jobId)}`;
  } catch {
    throw new AssayError("jobId: holds a lone surrogate, which no URL can carry");
  }
}

/** `client.inference`: the raw `/v2/detect` call, taking wire (snake_case) items. */
export class Inference {
  constructor(private readonly transport: Transport) {}

  /**
   * Score items with the detectors named in each item's `config`.
   *
   * @param body request items in the wire's snake_case (a single item is sent as a list).
   * @param options per-request timeout, retries or abort signal.
   * @returns one response item per request item, in order.
   * @throws DetectorFailedError when a detector failed under `must_compute: "all_or_none"`;
   *   a plain APIError when the answer does not hold one object per item sent; APIError
   *   subclasses by status, or APIConnectionError, as for any request.
   */
  async detect(
    body: DetectRequestItem[] | DetectRequestItem,
    options?: RequestOptions,
  ): Promise<DetectResponseItem[]> {
    const items = Array.isArray(body) ? body : [body];
    const answer = await requestJSON<DetectResponseItem[] | DetectResponseItem>(
      this.transport,
      "POST",
      "/v2/detect",
      items,
      options,
      detectAnswer(items.length),
    );
    return Array.isArray(answer) ? answer : [answer];
  }
}

/** `client.jobs`: the state of items sent with `asyncMode`, and waiting for them. */
export class Jobs {
  constructor(private readonly transport: Transport) {}

  /**
   * One job's state and, once done, its results.
   *
   * @param jobId the `job_id` from the async item's acceptance.
   * @param options per-request timeout, retries or abort signal.
   * @throws NotFoundError when the server knows no such job.
   */
  async retrieve(jobId: string, options?: RequestOptions): Promise<JobStatus> {
    const path = jobPath(jobId);
    return requestJSON<JobStatus>(this.transport, "GET", path, undefined, options, jobAnswer);
  }

  /**
   * Poll `retrieve` until the job is done or failed, and return it.
   *
   * @param jobId the `job_id` from the async item's acceptance.
   * @param options `timeoutMs` to wait in all (default 60000), `pollIntervalMs` between polls
   *   (default 500; the last pause is cut to the time left), `signal` to abort.
   * @returns the job, with `state` "done" (see `result`) or "failed" (see `error`).
   * @throws AssayError naming the option when `timeoutMs` or `pollIntervalMs` is not a number
   *   above zero; JobWaitTimeoutError (holding the job as last seen) when the job is still
   *   queued or running after `timeoutMs`; whatever `retrieve` throws (e.g. NotFoundError).
   */
  async wait(jobId: string, options: JobWaitOptions = {}): Promise<JobStatus> {
    const timeoutMs = checkedWaitOption(
      "timeoutMs",
      options.timeoutMs ?? DEFAULT_JOB_WAIT_TIMEOUT_MS,
    );
    const pollIntervalMs = checkedWaitOption(
      "pollIntervalMs",
      options.pollIntervalMs ?? DEFAULT_JOB_POLL_INTERVAL_MS,
    );
    const deadline = performance.now() + timeoutMs;
    let seen: JobStatus | undefined;
    // Set once a pause was cut to the time left: the poll after it is the deadline's poll.
    let atDeadline = false;
    for (;;) {
      // Each poll, retries included, ends with the wait (plus a grace, so the poll made at
      // the deadline can still see the job finish): a server that stops answering cannot
      // stretch the wait to several request timeouts.
      const pollMs = Math.max(deadline - performance.now(), JOB_POLL_GRACE_MS);
      const cutoff = pollMs < MAX_TIMER_MS ? AbortSignal.timeout(Math.ceil(pollMs)) : undefined;
      const signals = [options.signal, cutoff].filter((s) => s !== undefined);
      try {
        seen = await this.retrieve(jobId, {
          signal: signals.length > 0 ? AbortSignal.any(signals) : undefined,
        });
      } catch (error) {
        if (!cutoff?.aborted || options.signal?.aborted) throw error;
        if (seen !== undefined) throw new JobWaitTimeoutError(seen, timeoutMs);
        throw new APITimeoutError(
          `job ${JSON.stringify(jobId)}: the server did not answer within the wait's ${timeoutMs} ms`,
          error,
        );
      }
      const left = deadline - performance.now();
      if (seen.state === "done" || seen.state === "failed") return seen;
      // Not `left` alone: Node starts a timer on its event loop's clock, in whole milliseconds
      // and read when the loop last woke, so the last pause can end a millisecond or two
      // before the deadline by performance.now(), and that sliver made one poll too many.
      if (atDeadline || left <= 0) throw new JobWaitTimeoutError(seen, timeoutMs);
      atDeadline = left <= pollIntervalMs;
      await sleep(Math.min(pollIntervalMs, left), options.signal);
    }
  }
}

/** A client for one Assay server. */
export class Client {
  readonly baseURL: string;
  readonly timeout: number;
  readonly maxRetries: number;
  readonly inference: Inference;
  readonly jobs: Jobs;
  private readonly transport: Transport;

  /**
   * @param options how to reach the server; see `ClientOptions`. Bad values throw AssayError
   *   naming the option.
   */
  constructor(options: ClientOptions = {}) {
    const authHeader = checkedAuthHeader(
      options.authHeader ??
        (environment("ASSAY_API_KEY") ? `Bearer ${environment("ASSAY_API_KEY")}` : undefined),
    );
    this.baseURL = checkedBaseURL(
      options.baseURL ??
        environment("ASSAY_BASE_URL") ??
        environment("CLIENT_BASE_URL") ??
        DEFAULT_BASE_URL,
    );
    this.timeout = checkedOption("timeout", options.timeout ?? DEFAULT_TIMEOUT_MS);
    this.maxRetries = checkedOption("maxRetries", options.maxRetries ?? DEFAULT_MAX_RETRIES);
    this.transport = {
      baseURL: this.baseURL,
      authHeader,
      timeout: this.timeout,
      maxRetries: this.maxRetries,
      authHint: authHint(authHeader),
    };
    this.inference = new Inference(this.transport);
    this.jobs = new Jobs(this.transport);
  }

  /**
   * Score one response, given as an object (camelCase) ...
   *
   * @param params `{ generatedText, userQuery?, context?, config, instructions?, publish?,
   *   asyncMode?, applicationName?, modelName?, mustCompute? }`.
   * @returns a one-element list, as `/v2/detect` answers.
   */
  detect(params: DetectParams): Promise<DetectResponseItem[]>;
  /**
   * ... or positionally.
   *
   * @param generatedText the response being judged.
   * @param context background documents (string or list), or null.
   * @param userQuery the question, or null.
   * @param config which detectors to run.
   * @param options the rest of the item (instructions, publish, asyncMode, ...).
   */
  detect(
    generatedText: string,
    context?: string | string[] | null,
    userQuery?: string | null,
    config?: DetectConfig,
    options?: DetectOptions,
  ): Promise<DetectResponseItem[]>;
  // async, so that a bad argument is a rejected promise (an AssayError), never a throw.
  async detect(
    first: DetectParams | string,
    context?: string | string[] | null,
    userQuery?: string | null,
    config?: DetectConfig,
    options: DetectOptions = {},
  ): Promise<DetectResponseItem[]> {
    const params: DetectParams =
      typeof first === "string"
        ? { ...options, generatedText: first, context, userQuery, config: config as DetectConfig }
        : first;
    return this.inference.detect([toRequestItem(params)]);
  }
}

/**
 * One JSON request over `fetch`, with a per-attempt timeout and retries.
 */

import {
  APIConnectionError,
  APIError,
  APITimeoutError,
  AssayError,
  errorForResponse,
} from "./errors.js";
import { isRetryableStatus, retryDelayMs } from "./retry.js";

/** Options that can be set per request, overriding the client's. */
export interface RequestOptions {
  /** Milliseconds to wait for each attempt's full answer before giving up on it. */
  timeout?: number;
  /** Retries after the first attempt (on 408/409/429/5xx, timeouts and connection errors). */
  maxRetries?: number;
  /** Aborts the request (and any wait before a retry) when signalled; not retried. */
  signal?: AbortSignal;
}

/** Everything a request needs; built by the client from its own settings. */
export interface Transport {
  /** Server root without a trailing slash, e.g. `http://127.0.0.1:8000`. */
  baseURL: string;
  /** Value of the `Authorization` header, or undefined to send none. */
  authHeader: string | undefined;
  timeout: number;
  maxRetries: number;
  /** Added to the message of a 401, e.g. advice on passing `authHeader`. */
  authHint: string;
}

/** An attempt that failed in a way worth retrying (a retryable status, a timeout or a
 * connection error: all APIErrors), and the response headers if any. */
interface Retryable {
  error: APIError;
  headers: Headers | undefined;
}

/** Longest delay `setTimeout` keeps; a longer one would fire at once. */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * Wait `milliseconds` (at most about 24.8 days, the longest timer), or reject with the
 * signal's reason as soon as it aborts.
 */
export function sleep(milliseconds: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(
      () => {
        signal?.removeEventListener("abort", onAbort);
        resolve();
      },
      Math.min(milliseconds, MAX_TIMER_MS),
    );
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/**
 * A bad option's value for an error message: numbers as they are (`NaN`, `-1`), anything else
 * as JSON or its type, so that the text "5000" does not read as the number 5000.
 */
export function shown(value: unknown): string {
  if (typeof value === "number") return String(value);
  if (typeof value === "bigint") return `${value}n (a BigInt)`;
  try {
    const json = JSON.stringify(value);
    if (json !== undefined) return json.length > 80 ? `${json.slice(0, 80)}...` : json;
  } catch {
    // A cycle: fall back to the type.
  }
  return `a value of type ${typeof value}`;
}

/**
 * `value` if it is a finite number, above zero (timeouts) or a whole number >= 0 (retries);
 * else an AssayError naming the option. Used for the client's settings and per-request ones.
 */
export function checkedOption(name: "timeout" | "maxRetries", value: number): number {
  const wholeCount = name === "maxRetries";
  const valid =
    typeof value === "number" &&
    Number.isFinite(value) &&
    (wholeCount ? Number.isInteger(value) && value >= 0 : value > 0);
  if (!valid) {
    const expected = wholeCount ? "a whole number >= 0" : "a number of milliseconds > 0";
    throw new AssayError(`${name}: expected ${expected}, got ${shown(value)}`);
  }
  return value;
}

/** What is wrong with a success's JSON body for the caller (e.g. "a JSON array of objects"
 * expected), or undefined when it has the expected shape. */
export type ShapeCheck = (json: unknown) => string | undefined;

/** The body as JSON, or undefined when it is not JSON (an HTML error page, say). */
function parseJSON(text: string): { json: unknown } | undefined {
  try {
    return { json: JSON.parse(text) };
  } catch {
    return undefined;
  }
}

/**
 * Send one request and return the parsed JSON answer.
 *
 * @param transport connection settings.
 * @param method HTTP method.
 * @param path path below the base URL, starting with `/`.
 * @param body JSON-serialisable request body, or undefined for none.
 * @param options per-request overrides.
 * @param shape checks a success's JSON body (the caller's expected shape).
 * @throws AssayError naming a bad `timeout` or `maxRetries`, or a body JSON cannot carry
 *   (a BigInt), before anything is sent; DetectorFailedError (not retried) for an error
 *   response naming a failed detector; APIError subclasses: by status for error statuses,
 *   APIConnectionError / APITimeoutError (status undefined) when no answer came, after the
 *   retries are used up; a plain APIError (with the status and body) when a success's body is
 *   not JSON or not the expected shape.
 */
export async function requestJSON<T>(
  transport: Transport,
  method: string,
  path: string,
  body: unknown,
  options: RequestOptions = {},
  shape?: ShapeCheck,
): Promise<T> {
  const maxRetries = checkedOption("maxRetries", options.maxRetries ?? transport.maxRetries);
  const timeout = checkedOption("timeout", options.timeout ?? transport.timeout);
  const url = transport.baseURL + path;
  const headers: Record<string, string> = { accept: "application/json" };
  if (body !== undefined) headers["content-type"] = "application/json";
  if (transport.authHeader !== undefined) headers["authorization"] = transport.authHeader;
  let payload: string | undefined;
  try {
    payload = body === undefined ? undefined : JSON.stringify(body);
  } catch (cause) {
    throw new AssayError(`body: cannot be sent as JSON (${describe(cause)})`, { cause });
  }
  const settings = { ...options, timeout };
  for (let retry = 0; ; retry++) {
    const outcome = await attempt<T>(transport, url, method, headers, payload, settings, shape);
    if (!("error" in outcome)) return outcome.value;
    if (retry >= maxRetries) throw outcome.error;
    await sleep(retryDelayMs(retry, outcome.headers), options.signal);
  }
}

async function attempt<T>(
  transport: Transport,
  url: string,
  method: string,
  headers: Record<string, string>,
  payload: string | undefined,
  options: RequestOptions & { timeout: number },
  shape: ShapeCheck | undefined,
): Promise<{ value: T } | Retryable> {
  const timeout = options.timeout;
  const controller = new AbortController();
  // A timer past about 24.8 days would fire at once: a longer timeout waits that long.
  const timer = setTimeout(() => controller.abort(), Math.min(timeout, MAX_TIMER_MS));
  // The caller's signal cancels for good; our own timeout only ends this attempt.
  const signal = options.signal
    ? AbortSignal.any([options.signal, controller.signal])
    : controller.signal;
  let response: Response;
  let text: string;
  try {
    response = await fetch(url, { method, headers, body: payload, signal });
    text = await response.text();
  } catch (cause) {
    if (options.signal?.aborted) throw options.signal.reason;
    const error = controller.signal.aborted
      ? new APITimeoutError(`${method} ${url}: no answer within ${timeout} ms`, cause)
      : new APIConnectionError(`${method} ${url}: ${describe(cause)}`, cause);
    return { error, headers: undefined };
  } finally {
    clearTimeout(timer);
  }
  const parsed = parseJSON(text);
  if (response.ok) {
    const problem =
      parsed === undefined ? "a body that is not JSON" : (shape?.(parsed.json) ?? undefined);
    if (problem !== undefined) {
      const message = `${method} ${url}: the server answered ${response.status} with ${problem}`;
      throw new APIError(response.status, message, response.headers, parsed?.json ?? text);
    }
    return { value: parsed!.json as T };
  }
  const hint = response.status === 401 ? transport.authHint : "";
  const body = parsed === undefined ? text : parsed.json;
  const error = errorForResponse(response.status, body, response.headers, hint);
  // A DetectorFailedError is final: the server retried its judge before answering, and sending
  // the item again would judge it again (minutes more for a timed-out LLM judge).
  if (!(error instanceof APIError) || !isRetryableStatus(response.status)) throw error;
  return { error, headers: response.headers };
}

/** A readable reason from a `fetch` failure, whose useful part hides in `cause`. */
function describe(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const cause = error.cause;
  if (cause instanceof Error) {
    const code = (cause as { code?: unknown }).code;
    return `${error.message} (${typeof code === "string" ? `${code}: ` : ""}${cause.message})`;
  }
  return error.message;
}

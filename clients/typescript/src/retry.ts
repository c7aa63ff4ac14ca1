/**
 * When to retry and how long to wait. Kept apart from the transport so the policy can be
 * tested as plain functions.
 */

/** Statuses worth another attempt: the server was busy or failed, not the request. */
export function isRetryableStatus(status: number): boolean {
  return status === 408 || status === 409 || status === 429 || status >= 500;
}

/** First backoff delay, in milliseconds (before jitter). */
export const INITIAL_RETRY_DELAY_MS = 500;
/** Longest backoff delay, in milliseconds. */
export const MAX_RETRY_DELAY_MS = 8_000;
/** Longest wait the client honours from `retry-after`; a longer request is cut to it. */
export const MAX_RETRY_AFTER_MS = 60_000;

/**
 * The server's requested wait in milliseconds, from `retry-after-ms`, or `retry-after` as
 * seconds or an HTTP date, cut to `MAX_RETRY_AFTER_MS` (as the Python client does: a server
 * that asks for 120 s gets 60 s, not a quick retry); undefined when absent, unreadable or
 * negative.
 *
 * @param headers response headers, or undefined after a connection error.
 * @param now current time in epoch milliseconds (for HTTP dates).
 */
export function retryAfterMs(headers: Headers | undefined, now = Date.now()): number | undefined {
  if (headers === undefined) return undefined;
  let wait: number | undefined;
  const milliseconds = headers.get("retry-after-ms");
  const after = headers.get("retry-after");
  if (milliseconds !== null && milliseconds.trim() !== "") {
    wait = Number(milliseconds);
  } else if (after !== null && after.trim() !== "") {
    const seconds = Number(after);
    wait = Number.isNaN(seconds) ? Date.parse(after) - now : seconds * 1000;
  }
  if (wait === undefined || !Number.isFinite(wait) || wait < 0) return undefined;
  return Math.min(wait, MAX_RETRY_AFTER_MS);
}

/**
 * How long to wait before retry number `retry` (0 for the first retry): the server's
 * `retry-after` (at most `MAX_RETRY_AFTER_MS`) when it gave a usable one, else exponential
 * backoff with jitter, so that many clients turned away together do not come back together.
 *
 * @param retry how many retries came before this one.
 * @param headers the failed response's headers, or undefined after a connection error.
 * @param random a source of numbers in [0, 1) (Math.random; tests pass their own).
 */
export function retryDelayMs(
  retry: number,
  headers: Headers | undefined,
  random: () => number = Math.random,
): number {
  const requested = retryAfterMs(headers);
  if (requested !== undefined) return requested;
  const ceiling = Math.min(INITIAL_RETRY_DELAY_MS * 2 ** retry, MAX_RETRY_DELAY_MS);
  // Up to a quarter below the ceiling: spread out, but never much shorter than planned.
  return ceiling * (1 - 0.25 * random());
}

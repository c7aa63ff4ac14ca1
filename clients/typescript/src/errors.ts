/**
 * Errors the client throws. Every HTTP error carries the server's own `message` (the server
 * answers errors as `{"message": ..., "status": ...}`) and its status, so callers can branch on
 * the class and show the server's words. The hierarchy matches the Python client's: a 422 is
 * also a `BadRequestError`, and a request that got no answer (`APIConnectionError`,
 * `APITimeoutError`) is also an `APIError`, with `status` and `headers` undefined.
 */

import type { JobStatus } from "./jobs.js";

/** Base class of everything this package throws on purpose. */
export class AssayError extends Error {
  override name = "AssayError";
}

/**
 * The server answered with an error status, or (as `APIConnectionError`) could not be reached.
 */
export class APIError extends AssayError {
  override name = "APIError";
  /**
   * @param status HTTP status of the response; undefined when no response arrived.
   * @param message the server's `message` (or a description of the response when it had none,
   *   or of the failure when there was no response).
   * @param headers the response headers (e.g. `retry-after`); undefined when no response arrived.
   * @param body the parsed response body, or its raw text when it was not JSON; undefined when
   *   no response arrived.
   * @param options `cause`: the underlying error, e.g. from `fetch`.
   */
  constructor(
    readonly status: number | undefined,
    message: string,
    readonly headers: Headers | undefined,
    readonly body: unknown,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

/** 400: the body is not JSON, is empty, or is nested too deeply; also the base of 422. */
export class BadRequestError extends APIError {
  override name = "BadRequestError";
}
/** 401: the `Authorization` header is missing or holds an unknown key. */
export class AuthenticationError extends APIError {
  override name = "AuthenticationError";
}
/** 403: the key is known but may not do this. */
export class PermissionDeniedError extends APIError {
  override name = "PermissionDeniedError";
}
/** 404: no such route, job or application. */
export class NotFoundError extends APIError {
  override name = "NotFoundError";
}
/** 408: the server gave up waiting for the request (retried). */
export class RequestTimeoutError extends APIError {
  override name = "RequestTimeoutError";
}
/** 409: a conflicting request is in progress (retried). */
export class ConflictError extends APIError {
  override name = "ConflictError";
}
/** 413: the body, the batch or one text is larger than the server's limits. */
export class PayloadTooLargeError extends APIError {
  override name = "PayloadTooLargeError";
}
/**
 * 422: an item is invalid; the message names the item index and field, e.g. `[0].config`.
 * A `BadRequestError` too, as in the Python client.
 */
export class UnprocessableEntityError extends BadRequestError {
  override name = "UnprocessableEntityError";
}
/** 429: too many requests in flight (retried, honouring `retry-after` up to 60 s). */
export class RateLimitError extends APIError {
  override name = "RateLimitError";
}
/** 5xx: the server failed, e.g. 503 when a detector failed under `must_compute: "all_or_none"`. */
export class InternalServerError extends APIError {
  override name = "InternalServerError";
}

/**
 * No HTTP answer at all: connection refused or reset, DNS failure, ... (retried). An `APIError`
 * whose `status`, `headers` and `body` are undefined, as there was no response.
 */
export class APIConnectionError extends APIError {
  override name = "APIConnectionError";
  declare readonly status: undefined;
  declare readonly headers: undefined;
  declare readonly body: undefined;
  /**
   * @param message what went wrong, naming the URL.
   * @param cause the underlying error from `fetch`.
   */
  constructor(message: string, cause?: unknown) {
    super(undefined, message, undefined, undefined, { cause });
  }
}

/** No answer within the request's timeout (retried). */
export class APITimeoutError extends APIConnectionError {
  override name = "APITimeoutError";
}

/** A detector could not score an item; see `kind` (timeout, judge_error, ...) and `message`. */
export class DetectorFailedError extends AssayError {
  override name = "DetectorFailedError";
  /**
   * @param detector the detector's name, e.g. `completeness`.
   * @param kind the failure kind the server reported.
   * @param message the server's description of the failure.
   */
  constructor(
    readonly detector: string,
    readonly kind: string,
    message: string,
  ) {
    super(`detector ${JSON.stringify(detector)} failed (${kind}): ${message}`);
  }
}

/** `jobs.wait` gave up: the job was still queued or running when its time ran out. */
export class JobWaitTimeoutError extends AssayError {
  override name = "JobWaitTimeoutError";
  /**
   * @param job the job as last seen.
   * @param timeoutMs how long `jobs.wait` waited in all, in milliseconds.
   */
  constructor(
    readonly job: JobStatus,
    readonly timeoutMs: number,
  ) {
    super(`job ${JSON.stringify(job.id)} is still ${job.state} after ${timeoutMs} ms`);
  }
}

const BY_STATUS: Record<number, typeof APIError> = {
  400: BadRequestError,
  401: AuthenticationError,
  403: PermissionDeniedError,
  404: NotFoundError,
  408: RequestTimeoutError,
  409: ConflictError,
  413: PayloadTooLargeError,
  422: UnprocessableEntityError,
  429: RateLimitError,
};

/**
 * The error for an error response.
 *
 * @param status HTTP status.
 * @param body parsed JSON body, or the raw text when it was not JSON.
 * @param headers response headers.
 * @param hint extra advice appended to the message (e.g. how to pass a key).
 */
export function errorForResponse(
  status: number,
  body: unknown,
  headers: Headers,
  hint = "",
): APIError {
  const serverMessage =
    typeof body === "object" &&
    body !== null &&
    typeof (body as { message?: unknown }).message === "string"
      ? (body as { message: string }).message
      : typeof body === "string" && body.trim()
        ? body.trim().slice(0, 500)
        : "(no message)";
  const message = `${status} ${serverMessage}${hint}`;
  const ErrorClass = status >= 500 ? InternalServerError : (BY_STATUS[status] ?? APIError);
  return new ErrorClass(status, message, headers, body);
}

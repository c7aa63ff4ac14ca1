/**
 * Errors the client throws. The server answers errors as `{"message": ..., "status": ...}`; an
 * HTTP error's `message` is its status and the server's message (`"422 [0].config: ..."`, as in
 * AIMon's SDK), its `status` the status and its `body` the parsed body, so callers can branch
 * on the class and show the server's words (`body.message`). The hierarchy matches the Python
 * client's: a 422 is also a `BadRequestError`, and a request that got no answer
 * (`APIConnectionError`, `APITimeoutError`) is also an `APIError`, with `status` and `headers`
 * undefined. A detector that failed under `must_compute: "all_or_none"` is a
 * `DetectorFailedError`, as the Python client raises `DetectorFailed`.
 */

import type { JobStatus } from "./jobs.js";
import type { ErrorBody as GeneratedErrorBody } from "./wire.js";

/** The failed detector a 503 (or, for the item's own input, a 422) names in `failure`. */
export interface DetectorFailure {
  /** The item's position in the request, or null when the server could not tell. */
  item: number | null;
  detector: string;
  /** timeout, judge_error, input_too_long, content_filtered, ... */
  kind: string;
  message: string;
}

/**
 * The body of every error response. `failure` is added here by hand: the server puts it in the
 * body of a detector failure, but its OpenAPI schema (which `wire.ts` is generated from) does
 * not list it.
 */
export interface ErrorBody extends GeneratedErrorBody {
  failure?: DetectorFailure;
}

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
   * @param message the status and the server's `message` (`"404 job 'x' not found"`); when the
   *   response had no message, a description of it; when no response came, of the failure.
   * @param headers the response headers (e.g. `retry-after`); undefined when no response arrived.
   * @param body the parsed response body, or its raw text when it was not JSON; undefined when
   *   no response arrived.
   * @param options `cause`: the underlying error, e.g. from `fetch`. (Not `ErrorOptions`:
   *   that type needs lib ES2022, and this signature is in the published `.d.ts`.)
   */
  constructor(
    readonly status: number | undefined,
    message: string,
    readonly headers: Headers | undefined,
    readonly body: unknown,
    options?: { cause?: unknown },
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
/** 5xx: the server failed (a 503 naming a failed detector is a `DetectorFailedError` instead). */
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

/**
 * A detector could not score an item; see `kind` (timeout, judge_error, ...) and `message`.
 * Thrown by `detectorResult` for an error object, and by `detect` when the server answers that
 * a detector failed under `must_compute: "all_or_none"` (never retried: the server retried its
 * judge already, and sending the item again would judge it again).
 */
export class DetectorFailedError extends AssayError {
  override name = "DetectorFailedError";
  /**
   * @param detector the detector's name, e.g. `completeness`.
   * @param kind the failure kind the server reported.
   * @param message the server's description of the failure.
   * @param item the item's position in the request, when the server named it.
   * @param status the HTTP status of the server's answer (503, or 422 for a failure of the
   *   item's own input); undefined when the failure came in a response item.
   * @param body the server's answer, holding its own `message` and the `failure`.
   */
  constructor(
    readonly detector: string,
    readonly kind: string,
    message: string,
    readonly item?: number,
    readonly status?: number,
    readonly body?: ErrorBody,
  ) {
    const where = item === undefined ? "" : `[${item}].config.${detector}: `;
    super(`${where}detector ${JSON.stringify(detector)} failed (${kind}): ${message}`);
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

/** The body's `failure` when it is well formed, as the Python client reads it; else undefined. */
function detectorFailure(body: unknown): DetectorFailure | undefined {
  const failure =
    typeof body === "object" && body !== null ? (body as { failure?: unknown }).failure : undefined;
  if (typeof failure !== "object" || failure === null) return undefined;
  const { item, detector, kind, message } = failure as Record<string, unknown>;
  if (typeof detector !== "string" || typeof kind !== "string" || typeof message !== "string") {
    return undefined;
  }
  return { item: Number.isInteger(item) ? (item as number) : null, detector, kind, message };
}

/**
 * The error for an error response: a `DetectorFailedError` when the body names a failed
 * detector (`failure`), else the `APIError` subclass for the status.
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
): APIError | DetectorFailedError {
  const failure = detectorFailure(body);
  if (failure !== undefined) {
    const { detector, kind, message, item } = failure;
    return new DetectorFailedError(
      detector,
      kind,
      message,
      item ?? undefined,
      status,
      body as ErrorBody,
    );
  }
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

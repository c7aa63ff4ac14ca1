"""Talking to an Assay server over HTTP: the `APIError` family and what is worth retrying.

A failed request becomes the `APIError` subclass that names what went wrong (by HTTP status, or
by transport failure); `classify()` says whether another attempt might succeed, and when the
delay comes from the server, for the shared policy in `assay.retries`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from assay.retries import Retryable, retry_after_seconds
from assay.schema import AssayError

# --- errors -------------------------------------------------------------------------------------


class APIError(AssayError):
    """The server answered with an error, or could not be reached.

    message: the server's explanation (its `detail` or `message` field), or ours.
    status_code: the HTTP status, or None when no response arrived.
    body: the decoded response body (JSON value, else text), or None when no response arrived.
    retry_after: seconds the server asked to wait before another try (`retry-after`), if it did.
    """

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None = None,
        body: Any = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message if status_code is None else f"HTTP {status_code}: {message}")
        self.message = message
        self.status_code = status_code
        self.body = body
        self.retry_after = retry_after


class BadRequestError(APIError):
    """400 or 422: the server rejected the request items."""


class UnprocessableEntityError(BadRequestError):
    """422: the request items are malformed (AIMon's SDK raises the same name)."""


class AuthenticationError(APIError):
    """401: missing or invalid credentials."""


class PermissionDeniedError(APIError):
    """403: the credentials may not do this."""


class NotFoundError(APIError):
    """404: wrong base URL or route."""


class RequestTimeoutError(APIError):
    """408: the server gave up waiting for the request."""


class ConflictError(APIError):
    """409: the request conflicts with the server's state."""


class PayloadTooLargeError(APIError):
    """413: too many items or too much text in one request (the message says which limit)."""


class RateLimitError(APIError):
    """429: too many requests (retried before it is raised)."""


class InternalServerError(APIError):
    """5xx: the server failed (retried before it is raised)."""


class APIConnectionError(APIError):
    """No response: the connection failed (retried before it is raised)."""


class APITimeoutError(APIConnectionError):
    """No response within the client's timeout (retried before it is raised)."""


_ERRORS_BY_STATUS: dict[int, type[APIError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    408: RequestTimeoutError,
    409: ConflictError,
    413: PayloadTooLargeError,
    422: UnprocessableEntityError,
    429: RateLimitError,
}


# --- responses and retries ----------------------------------------------------------------------


def decoded_body(response: httpx.Response) -> Any:
    """The response body as JSON, else as text."""
    try:
        return response.json()
    except ValueError:
        return response.text


def _server_message(body: Any) -> str | None:
    """The human part of an error body: `detail` (FastAPI), `message`, or `error`."""
    if isinstance(body, Mapping):
        for key in ("detail", "message", "error"):
            value = body.get(key)
            if isinstance(value, str):
                return value
            if isinstance(value, Mapping) and isinstance(value.get("message"), str):
                return str(value["message"])
            if isinstance(value, list) and value:
                return "; ".join(
                    f"{'.'.join(map(str, entry.get('loc', ())))}: {entry.get('msg', entry)}"
                    if isinstance(entry, Mapping)
                    else str(entry)
                    for entry in value
                )
    if isinstance(body, str) and body.strip():
        return body.strip()[:500]
    return None


def status_error(response: httpx.Response) -> APIError:
    body = decoded_body(response)
    message = _server_message(body) or response.reason_phrase or "request failed"
    code = response.status_code
    error_class = _ERRORS_BY_STATUS.get(code, InternalServerError if code >= 500 else APIError)
    retry_after = retry_after_seconds(response.headers)
    return error_class(message, status_code=code, body=body, retry_after=retry_after)


def url_problem(url: str) -> str | None:
    """What makes `url` unusable before any connection is tried (it does not parse, or its
    port is out of range), or None. Caught here, since httpx reports a bad port only from deep
    inside its connection pool, as an exception group."""
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as error:
        return f"{url!r} is not a valid URL ({error})"
    if parsed.port is not None and not 0 < parsed.port < 65536:
        return f"{url!r} has port {parsed.port}, outside 1-65535"
    return None


def header_problem(value: str) -> str | None:
    """Why `value` cannot go in an HTTP header ("has a line break at position 12", "has the
    character U+00E9 at position 6"), or None. Never quotes the value: headers hold secrets."""
    for position, char in enumerate(value):
        if not (" " <= char <= "~" or char == "\t"):
            what = "a line break" if char in "\r\n" else f"the character U+{ord(char):04X}"
            return f"has {what} at position {position}"
    return None


def transport_error(error: httpx.TransportError) -> APIError:
    if isinstance(error, httpx.TimeoutException):
        # httpx's timeouts often carry no text of their own.
        failure: APIError = APITimeoutError(
            f"request timed out: {error or 'no answer within the client timeout'}"
        )
    elif isinstance(error, httpx.LocalProtocolError | httpx.UnsupportedProtocol):
        failure = APIConnectionError(
            f"could not send the request (check base_url and auth_header): {error}"
        )
    else:
        failure = APIConnectionError(f"could not reach the server: {error}")
    failure.__cause__ = error
    return failure


def classify(error: Exception) -> Retryable | None:
    """Whether another attempt might succeed: 429, 5xx and connection failures are retried."""
    if not isinstance(error, APIError):
        return None
    # A request this client cannot even send (bad header, bad URL scheme) will not improve.
    if isinstance(error.__cause__, httpx.LocalProtocolError | httpx.UnsupportedProtocol):
        return None
    if isinstance(error, RateLimitError):
        return Retryable("rate_limited", error.retry_after)
    if isinstance(error, InternalServerError):
        return Retryable("transport", error.retry_after)
    if isinstance(error, APITimeoutError):
        return Retryable("timeout")
    if isinstance(error, APIConnectionError):
        return Retryable("transport")
    return None

"""Talking to an Assay server over HTTP: the `APIError` family and the retry helpers.

A failed request becomes the `APIError` subclass that names what went wrong (by HTTP status, or
by transport failure); `retryable()` and `retry_delay()` decide whether and when to try again.
"""

from __future__ import annotations

import email.utils
import math
import random
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import httpx

from assay.schema import AssayError

__all__ = [
    "APIConnectionError",
    "APIError",
    "APITimeoutError",
    "AuthenticationError",
    "BadRequestError",
    "InternalServerError",
    "NotFoundError",
    "PermissionDeniedError",
    "RateLimitError",
    "decoded_body",
    "retry_delay",
    "retryable",
    "status_error",
    "transport_error",
]

_INITIAL_BACKOFF_SECONDS = 0.5
_MAX_BACKOFF_SECONDS = 8.0
_MAX_RETRY_AFTER_SECONDS = 60.0


# --- errors -------------------------------------------------------------------------------------


class APIError(AssayError):
    """The server answered with an error, or could not be reached.

    message: the server's explanation (its `detail` or `message` field), or ours.
    status_code: the HTTP status, or None when no response arrived.
    body: the decoded response body (JSON value, else text), or None when no response arrived.
    """

    def __init__(self, message: str, *, status_code: int | None = None, body: Any = None) -> None:
        super().__init__(message if status_code is None else f"HTTP {status_code}: {message}")
        self.message = message
        self.status_code = status_code
        self.body = body


class BadRequestError(APIError):
    """400 or 422: the server rejected the request items."""


class AuthenticationError(APIError):
    """401: missing or invalid credentials."""


class PermissionDeniedError(APIError):
    """403: the credentials may not do this."""


class NotFoundError(APIError):
    """404: wrong base URL or route."""


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
    422: BadRequestError,
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
    return error_class(message, status_code=code, body=body)


def transport_error(error: httpx.TransportError) -> APIError:
    if isinstance(error, httpx.TimeoutException):
        failure: APIError = APITimeoutError(f"request timed out: {error}")
    else:
        failure = APIConnectionError(f"could not reach the server: {error}")
    failure.__cause__ = error
    return failure


def retry_delay(attempt: int, retry_after: str | None) -> float:
    """Seconds to wait before retry number `attempt + 1`: the server's `retry-after` when it
    sent one, else exponential backoff with jitter so that many clients do not retry in step."""
    seconds = _retry_after_seconds(retry_after) if retry_after is not None else None
    if seconds is not None:
        return min(max(seconds, 0.0), _MAX_RETRY_AFTER_SECONDS)
    backoff = min(_MAX_BACKOFF_SECONDS, _INITIAL_BACKOFF_SECONDS * 2.0**attempt)
    return backoff * random.uniform(0.5, 1.0)


def _retry_after_seconds(value: str) -> float | None:
    """A `retry-after` header in seconds: delta-seconds or an HTTP date; None if unreadable."""
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return seconds if math.isfinite(seconds) else None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return (when - datetime.now(UTC)).total_seconds()


def retryable(error: APIError) -> bool:
    """Whether another attempt might succeed: 429, 5xx and connection failures."""
    # A request this client cannot even send (bad header, bad URL scheme) will not improve.
    if isinstance(error.__cause__, httpx.LocalProtocolError | httpx.UnsupportedProtocol):
        return False
    return isinstance(error, RateLimitError | InternalServerError | APIConnectionError)

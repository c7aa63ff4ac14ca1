"""The one retry policy of every remote call Assay makes: the Python client's requests to an Assay
server, the LLM layer's calls, and the OOD metric's calls to the system under test.

A failed attempt that is worth retrying waits `RetryPolicy.delay` seconds: what the server asked
for in `retry-after` (or `retry-after-ms`) when it said, else exponential backoff with jitter.
`retry` runs the loop; each caller says what is worth retrying and turns the final failure into
its own error type.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import math
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeVar

logger = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """How often to try and how long to wait in between.

    attempts: tries in all (1 = no retry).
    base_delay: ceiling of the first backoff, in seconds; it doubles with every retry.
    max_delay: the backoff's largest ceiling.
    max_retry_after: the longest server-requested wait honoured; a longer request is cut to it.
    """

    attempts: int = 3
    base_delay: float = 0.5
    max_delay: float = 8.0
    max_retry_after: float = 60.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"attempts must be at least 1, got {self.attempts}")
        if self.base_delay < 0 or self.max_delay < 0 or self.max_retry_after < 0:
            raise ValueError("retry delays must not be negative")

    def backoff(self, retry: int) -> float:
        """Seconds before retry number `retry + 1` when the server said nothing: uniform in the
        upper half of min(max_delay, base_delay * 2**retry). The jitter keeps many clients from
        retrying in step; the floor keeps the backoff growing."""
        ceiling = min(self.max_delay, self.base_delay * 2.0**retry)
        return ceiling * random.uniform(0.5, 1.0)

    def delay(self, retry: int, retry_after: float | None = None) -> float:
        """Seconds before retry number `retry + 1`: the server's `retry_after` (cut to
        `max_retry_after`) when it sent one, since it knows when it will have room, else
        `backoff(retry)`."""
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_retry_after)
        return self.backoff(retry)


def parse_retry_after(value: str | None) -> float | None:
    """A `retry-after` value in seconds: delta-seconds or an HTTP date (a past date is 0);
    None when absent or unreadable."""
    if value is None or not value.strip():
        return None
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return max(seconds, 0.0) if math.isfinite(seconds) else None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max((when - datetime.now(UTC)).total_seconds(), 0.0)


def retry_after_seconds(headers: Mapping[str, str] | None) -> float | None:
    """The wait a response's headers ask for: `retry-after-ms` (OpenAI's), else `retry-after`.

    headers: response headers with lower-case lookups (httpx's are case-insensitive).
    """
    if headers is None:
        return None
    milliseconds = headers.get("retry-after-ms")
    if milliseconds:
        try:
            value = float(milliseconds) / 1000
        except ValueError:
            pass
        else:
            if math.isfinite(value):
                return max(value, 0.0)
    return parse_retry_after(headers.get("retry-after"))


@dataclass(frozen=True)
class Retryable:
    """A failure worth another attempt.

    kind: what went wrong, for logs and the final error (e.g. "rate_limited").
    retry_after: seconds the server asked to wait, if it said.
    """

    kind: str
    retry_after: float | None = None


class GaveUp(Exception):
    """No more attempts: the failure was not retryable, retries ran out, or the next wait would
    pass the deadline.

    error: the last attempt's exception.
    attempts: attempts made.
    retry: the last failure's classification (None when it was not retryable).
    out_of_time: whether the deadline, not the attempt count, ended the retries.
    """

    def __init__(
        self, error: Exception, attempts: int, retry: Retryable | None, out_of_time: bool
    ) -> None:
        super().__init__(str(error))
        self.error = error
        self.attempts = attempts
        self.retry = retry
        self.out_of_time = out_of_time


async def retry(
    attempt: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    classify: Callable[[Exception], Retryable | None],
    *,
    deadline: float | None = None,
    what: str = "call",
) -> T:
    """Run `attempt` until it returns, retrying as `policy` says.

    attempt: makes one try; any exception it raises is passed to `classify`.
    classify: a Retryable when the failure is worth another try, else None.
    deadline: `time.monotonic()` value no wait may reach; None for no limit.
    what: names the call in log lines.

    Raises GaveUp with the last exception when no further attempt will be made.
    """
    made = 0
    while True:
        try:
            made += 1
            return await attempt()
        except Exception as error:
            verdict = classify(error)
            if verdict is None or made >= policy.attempts:
                raise GaveUp(error, made, verdict, out_of_time=False) from error
            wait = policy.delay(made - 1, verdict.retry_after)
            if deadline is not None and time.monotonic() + wait >= deadline:
                raise GaveUp(error, made, verdict, out_of_time=True) from error
            logger.info(
                "%s failed (%s: %s); retry %d in %.2fs", what, verdict.kind, error, made, wait
            )
            await asyncio.sleep(wait)

"""The one retry policy (`assay.retries`), alone: backoff with jitter, `retry-after` honoured and
parsed in one place, and the retry loop's attempts, give-ups and deadline. Waits are computed
and recorded, never measured."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from assay import retries
from assay.retries import (
    GaveUp,
    Retryable,
    RetryPolicy,
    parse_retry_after,
    retry,
    retry_after_seconds,
)


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    """The loop's sleeps, recorded instead of slept."""
    recorded: list[float] = []

    async def recording_sleep(delay: float) -> None:
        recorded.append(delay)

    monkeypatch.setattr(retries.asyncio, "sleep", recording_sleep)
    yield recorded


def test_backoff_doubles_up_to_its_cap_with_jitter_in_the_upper_half() -> None:
    policy = RetryPolicy(base_delay=0.5, max_delay=8.0)
    for retry_number, ceiling in ((0, 0.5), (1, 1.0), (2, 2.0), (3, 4.0), (10, 8.0)):
        delays = {policy.delay(retry_number) for _ in range(30)}
        assert all(ceiling / 2 <= delay <= ceiling for delay in delays)
        assert len(delays) > 1  # jittered: concurrent clients do not retry in step


def test_retry_after_is_honoured_and_capped() -> None:
    policy = RetryPolicy(base_delay=0.5, max_delay=8.0, max_retry_after=60.0)
    assert policy.delay(0, 0.0) == 0.0
    assert policy.delay(3, 1.5) == 1.5  # the server's word, not the (longer) backoff
    assert policy.delay(0, 30.0) == 30.0  # nor the (shorter) one
    assert policy.delay(0, 3600.0) == 60.0


def test_one_parser_reads_every_retry_after_form() -> None:
    assert parse_retry_after("7") == 7.0
    assert parse_retry_after("0") == 0.0
    assert parse_retry_after("-3") == 0.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # a date in the past
    later = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 30))
    assert 20 < (parse_retry_after(later) or 0) <= 31
    for unreadable in (None, "", "soon", "nan", "inf"):
        assert parse_retry_after(unreadable) is None
    assert retry_after_seconds(httpx.Headers({"Retry-After": "7"})) == 7.0
    assert retry_after_seconds(httpx.Headers({"retry-after-ms": "250", "retry-after": "9"})) == 0.25
    assert retry_after_seconds(httpx.Headers({"retry-after-ms": "x", "retry-after": "9"})) == 9.0
    assert retry_after_seconds(httpx.Headers({})) is None
    assert retry_after_seconds(None) is None


class Flaky:
    """Fails `failures` times with `error`, then returns "ok"."""

    def __init__(self, failures: int, error: Exception) -> None:
        self.failures = failures
        self.error = error
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return "ok"


def always(kind: str, retry_after: float | None = None) -> Retryable:
    return Retryable(kind, retry_after)


async def test_retryable_failures_are_retried_until_success(waits: list[float]) -> None:
    attempt = Flaky(2, ConnectionError("reset"))
    policy = RetryPolicy(attempts=3, base_delay=0.5, max_delay=8.0)
    assert await retry(attempt, policy, lambda error: always("transport")) == "ok"
    assert attempt.calls == 3
    assert len(waits) == 2
    assert 0.25 <= waits[0] <= 0.5 and 0.5 <= waits[1] <= 1.0


async def test_the_servers_retry_after_sets_the_wait(waits: list[float]) -> None:
    attempt = Flaky(1, ConnectionError("429"))
    await retry(attempt, RetryPolicy(attempts=2), lambda error: always("rate_limited", 3.0))
    assert waits == [3.0]


async def test_gives_up_when_attempts_run_out(waits: list[float]) -> None:
    error = ConnectionError("down")
    attempt = Flaky(10, error)
    with pytest.raises(GaveUp) as caught:
        await retry(attempt, RetryPolicy(attempts=4), lambda e: always("transport"))
    assert attempt.calls == 4 and len(waits) == 3
    assert caught.value.error is error and caught.value.attempts == 4
    assert caught.value.retry == Retryable("transport") and not caught.value.out_of_time


async def test_a_failure_not_worth_retrying_ends_at_once(waits: list[float]) -> None:
    attempt = Flaky(10, ValueError("HTTP 400"))
    with pytest.raises(GaveUp) as caught:
        await retry(attempt, RetryPolicy(attempts=5), lambda error: None)
    assert attempt.calls == 1 and waits == []
    assert caught.value.retry is None and isinstance(caught.value.error, ValueError)


async def test_no_wait_may_pass_the_deadline(waits: list[float]) -> None:
    attempt = Flaky(10, ConnectionError("429"))
    deadline = time.monotonic() + 5.0
    with pytest.raises(GaveUp) as caught:
        await retry(
            attempt,
            RetryPolicy(attempts=5),
            lambda e: always("rate_limited", 30.0),
            deadline=deadline,
        )
    assert attempt.calls == 1 and waits == []  # waiting 30 s would pass the deadline
    assert caught.value.out_of_time and caught.value.retry == Retryable("rate_limited", 30.0)


def test_a_policy_needs_at_least_one_attempt() -> None:
    with pytest.raises(ValueError, match="attempts"):
        RetryPolicy(attempts=0)

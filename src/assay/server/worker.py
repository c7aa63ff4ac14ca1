"""The background worker that finishes async jobs.

It runs inside the server process as an asyncio task: it claims jobs from the `jobs` table
(see `assay.store.jobs` for why a job is finished exactly once), scores them with the same
core as a synchronous request, and writes results and the state change in one transaction.
Jobs a killed process left half-done are picked up again once their lease expires.

Each job runs as its own task, and a new job is claimed as soon as any slot frees up, so one
slow job (a silent LLM endpoint) delays nobody else. A running job's lease is renewed while it
works, so only a dead worker's jobs are taken over.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from sqlalchemy.orm import Session

from assay.detectors.evaluate import detect_items, failed_results, parse_item
from assay.schema import DetectorFailed, DetectRequestItem, JudgeFailure, RequestValidationError
from assay.server.settings import ServerSettings
from assay.store import jobs
from assay.store.detections import add_detections
from assay.store.session import Store

logger = logging.getLogger(__name__)
#: While claiming keeps failing, a line at most this often.
FAILURE_LOG_SECONDS = 60.0


class JobWorker:
    """Claims and runs jobs until stopped.

    store: where the jobs live.
    settings: lease, attempts, concurrency and polling interval (`job_*` settings), and
        `judge_timeout_seconds` (longest a job may be judged).
    """

    def __init__(self, store: Store, settings: ServerSettings) -> None:
        self.store = store
        self.settings = settings
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        #: Each running job's task, and the job's id: those jobs are never claimed again by
        #: this worker.
        self._running: dict[asyncio.Task[None], str] = {}
        #: When claiming started failing (None while it works), and when that was last logged.
        self._failing_since: float | None = None
        self._failure_logged_at = 0.0
        self._claim_error = ""

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="assay-job-worker")
        self._task.add_done_callback(_report_stop)

    @property
    def alive(self) -> bool:
        """Whether the worker is still claiming jobs (False once stopped or crashed)."""
        return self._task is not None and not self._task.done()

    @property
    def running(self) -> int:
        """How many jobs this process holds right now."""
        return len(self._running)

    def wake(self) -> None:
        """Look for jobs now (called after a request queued one)."""
        self._wake.set()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        try:
            while True:
                # Cleared before looking, so a wake() that arrives meanwhile is not lost.
                self._wake.clear()
                free = self.settings.job_concurrency - len(self._running)
                if free > 0:
                    for job in await self._claim(free):
                        task = asyncio.create_task(self._process(job), name=f"assay-job-{job.id}")
                        self._running[task] = job.id
                await self._wait_for_change()
        finally:
            # Shutting down: each running job hands itself back to the queue (see _process).
            for task in self._running:
                task.cancel()
            await asyncio.gather(*self._running, return_exceptions=True)
            self._running.clear()

    async def _claim(self, limit: int) -> list[jobs.ClaimedJob]:
        try:
            claimed = await asyncio.to_thread(
                jobs.claim,
                self.store,
                limit,
                self.settings.job_lease_seconds,
                self.settings.job_max_attempts,
                frozenset(self._running.values()),
            )
        except Exception as error:  # the database hiccuped; try again on the next round
            self._claim_failed(error)
            return []
        if self._failing_since is not None:
            down = time.monotonic() - self._failing_since
            logger.warning("claiming jobs again after %.0f s of failures", down)
            self._failing_since = None
        return claimed

    @property
    def claims_failing(self) -> str | None:
        """Why claiming jobs keeps failing (its last error's first line), or None while it
        works: queued jobs then never run, which /healthz must not call ok."""
        return self._claim_error if self._failing_since is not None else None

    def _claim_failed(self, error: Exception) -> None:
        """Log the first failure in full, then one line a minute while they go on (the worker
        polls every fraction of a second: a database outage would flood the log)."""
        now = time.monotonic()
        self._claim_error = (str(error).strip() or type(error).__name__).splitlines()[0]
        if self._failing_since is None:
            self._failing_since = self._failure_logged_at = now
            logger.exception("could not claim jobs; retrying")
        elif now - self._failure_logged_at >= FAILURE_LOG_SECONDS:
            self._failure_logged_at = now
            first_line = (str(error).strip() or type(error).__name__).splitlines()[0]
            down = now - self._failing_since
            logger.warning("still cannot claim jobs after %.0f s: %s", down, first_line)

    async def _wait_for_change(self) -> None:
        """Until a job finishes, a request queues one, or it is time to poll again."""
        woken = asyncio.create_task(self._wake.wait())
        try:
            done, _ = await asyncio.wait(
                {*self._running, woken},
                timeout=self.settings.job_poll_seconds,
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            woken.cancel()
        for task in [task for task in self._running if task in done]:
            del self._running[task]
            if not task.cancelled() and task.exception() is not None:
                logger.error("job task failed", exc_info=task.exception())

    async def _process(self, job: jobs.ClaimedJob) -> None:
        try:
            item = parse_item(job.request)
        except RequestValidationError as error:
            await asyncio.to_thread(jobs.fail, self.store, job, f"stored request invalid: {error}")
            return
        lease = asyncio.create_task(self._keep_lease(job))
        try:
            results = await self._judge(item)
        except asyncio.CancelledError:
            # The server is shutting down: hand the job back now rather than after its lease.
            await asyncio.to_thread(jobs.release, self.store, job, "server stopped", refund=True)
            raise
        except DetectorFailed as error:
            # Judged alone, the item is "[0]" to the detectors; the job is one item, so its
            # error names no position (it pointed at the request's first item).
            message = str(DetectorFailed(error.detector, error.failure))
            await asyncio.to_thread(jobs.fail, self.store, job, message)
            return
        except Exception as error:
            logger.exception("job %s failed unexpectedly; it will be retried", job.id)
            await asyncio.to_thread(
                jobs.release, self.store, job, f"{type(error).__name__}: {error}"
            )
            return
        finally:
            lease.cancel()

        def write(session: Session) -> None:
            add_detections(session, item, results, request_id=job.id, job_id=job.id)

        done = await asyncio.to_thread(jobs.complete, self.store, job, results, write)
        if done:
            logger.info("job %s done (attempt %d)", job.id, job.attempt)

    async def _judge(self, item: DetectRequestItem) -> dict[str, Any]:
        seconds = self.settings.judge_timeout_seconds
        try:
            async with asyncio.timeout(seconds):
                return (await detect_items([item]))[0]
        except TimeoutError:
            failure = JudgeFailure("timeout", f"not judged within {seconds:g} s")
            return failed_results([item], failure)[0]

    async def _keep_lease(self, job: jobs.ClaimedJob) -> None:
        lease = self.settings.job_lease_seconds
        while True:
            await asyncio.sleep(lease / 3)
            try:
                held = await asyncio.to_thread(jobs.renew, self.store, job, lease)
            except Exception:  # a missed renewal only risks a duplicate attempt, never a result
                logger.exception("could not renew the lease of job %s", job.id)
                continue
            if not held:
                return


def _report_stop(task: asyncio.Task[None]) -> None:
    # A worker that dies leaves the server answering but finishing no job: say why, loudly
    # (and /healthz turns 503 so a load balancer can replace the replica).
    if not task.cancelled() and task.exception() is not None:
        logger.critical("the job worker stopped", exc_info=task.exception())

"""The background worker that finishes async jobs.

It runs inside the server process as an asyncio task: it claims jobs from the `jobs` table
(see `assay.store.jobs` for why a job is finished exactly once), scores them with the same
core as a synchronous request, and writes results and the state change in one transaction.
Jobs a killed process left half-done are picked up again once their lease expires.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from sqlalchemy.orm import Session

from assay.detectors.evaluate import detect_items, parse_item
from assay.schema import DetectorFailed, RequestValidationError
from assay.server.settings import ServerSettings
from assay.store import jobs
from assay.store.detections import add_detections
from assay.store.session import Store

logger = logging.getLogger(__name__)


class JobWorker:
    """Claims and runs jobs until stopped.

    store: where the jobs live.
    settings: lease, attempts, concurrency and polling interval (`job_*` settings).
    """

    def __init__(self, store: Store, settings: ServerSettings) -> None:
        self.store = store
        self.settings = settings
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="assay-job-worker")

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
        while True:
            try:
                claimed = await asyncio.to_thread(
                    jobs.claim,
                    self.store,
                    self.settings.job_concurrency,
                    self.settings.job_lease_seconds,
                    self.settings.job_max_attempts,
                )
            except Exception:  # the database hiccuped; try again on the next round
                logger.exception("could not claim jobs")
                claimed = []
            if claimed:
                await asyncio.gather(*(self._process(job) for job in claimed))
                continue
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.settings.job_poll_seconds)

    async def _process(self, job: jobs.ClaimedJob) -> None:
        try:
            item = parse_item(job.request)
        except RequestValidationError as error:
            await asyncio.to_thread(jobs.fail, self.store, job, f"stored request invalid: {error}")
            return
        try:
            results = (await detect_items([item]))[0]
        except asyncio.CancelledError:
            # The server is shutting down: hand the job back now rather than after its lease.
            await asyncio.to_thread(jobs.release, self.store, job, "server stopped", refund=True)
            raise
        except DetectorFailed as error:
            await asyncio.to_thread(jobs.fail, self.store, job, str(error))
            return
        except Exception as error:
            logger.exception("job %s failed unexpectedly; it will be retried", job.id)
            await asyncio.to_thread(
                jobs.release, self.store, job, f"{type(error).__name__}: {error}"
            )
            return

        def write(session: Session) -> None:
            add_detections(session, item, results, request_id=job.id, job_id=job.id)

        done = await asyncio.to_thread(jobs.complete, self.store, job, results, write)
        if done:
            logger.info("job %s done (attempt %d)", job.id, job.attempt)

"""The durable job queue on the `jobs` table, shared by every server process on a database.

A job is claimed by a conditional UPDATE (only one worker can win it) that bumps its attempt
counter and sets a lease. On PostgreSQL the candidates are first locked with
`SELECT ... FOR UPDATE SKIP LOCKED`, so replicas polling at once take different jobs instead of
racing for the same oldest ones; SQLite has one writer at a time and needs no such lock.

A job is finished by another conditional UPDATE that only matches the
claim still held (same attempt, still running), written in the same transaction as its
detections, so a job's results are stored exactly once even if a worker died mid-way and the
job was claimed again after its lease ran out.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import func, or_, select, update
from sqlalchemy.orm import Session

from assay.store.models import Job, JobState, utcnow
from assay.store.session import Store

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClaimedJob:
    """A job this worker holds: its id, which attempt this is, and the request item JSON."""

    id: str
    attempt: int
    request: dict[str, Any]


def enqueue(
    session: Session, job_id: str, request: dict[str, Any], application: str, model: str
) -> None:
    """Add a queued job inside the caller's transaction (the one accepting the request)."""
    now = utcnow()
    session.add(
        Job(
            id=job_id,
            state=JobState.QUEUED.value,
            attempts=0,
            application_name=application,
            model_name=model,
            request=request,
            created_at=now,
            updated_at=now,
        )
    )


def _claimable() -> Any:
    now = utcnow()
    return or_(
        Job.state == JobState.QUEUED.value,
        (Job.state == JobState.RUNNING.value) & (Job.lease_expires_at < now),
    )


def claim(
    store: Store,
    limit: int,
    lease_seconds: float,
    max_attempts: int,
    holding: Collection[str] = (),
) -> list[ClaimedJob]:
    """Claim up to `limit` jobs that are queued or whose lease ran out.

    A job already claimed `max_attempts` times is marked failed instead: a request that kills
    its worker every time must not take the server down forever.
    holding: ids of the jobs the caller is still working on. Never taken over by the caller
        itself, even if a renewal came late (a write lock held up on SQLite): the caller is
        alive, and taking its own job again only dropped the result and spent an attempt.
    """
    candidates = (
        select(Job.id, Job.attempts, Job.request)
        .where(_claimable(), Job.id.not_in(list(holding)))
        .order_by(Job.created_at)
    )
    if store.is_postgresql:
        with store.transaction() as session:
            locked = session.execute(candidates.limit(limit).with_for_update(skip_locked=True))
            return [
                job
                for job_id, attempts, request in locked.all()
                if (job := _take(session, job_id, attempts, request, lease_seconds, max_attempts))
            ]
    with store.reading() as session:
        found = session.execute(candidates.limit(limit)).all()
    claimed: list[ClaimedJob] = []
    for job_id, attempts, request in found:
        with store.transaction() as session:
            job = _take(session, job_id, attempts, request, lease_seconds, max_attempts)
        if job is not None:
            claimed.append(job)
    return claimed


def _take(
    session: Session,
    job_id: str,
    attempts: int,
    request: dict[str, Any],
    lease_seconds: float,
    max_attempts: int,
) -> ClaimedJob | None:
    """Claim one candidate seen with `attempts`, unless another worker changed it since
    (the conditional UPDATE then matches nothing); fail it instead past `max_attempts`."""
    now = utcnow()
    still = (Job.id == job_id, Job.attempts == attempts, _claimable())
    if attempts >= max_attempts:
        session.execute(
            update(Job)
            .where(*still)
            .values(
                state=JobState.FAILED.value,
                error=f"gave up after {attempts} attempts",
                finished_at=now,
                updated_at=now,
            )
        )
        return None
    won = session.execute(
        update(Job)
        .where(*still)
        .values(
            state=JobState.RUNNING.value,
            attempts=attempts + 1,
            lease_expires_at=now + timedelta(seconds=lease_seconds),
            updated_at=now,
        )
    )
    if won.rowcount != 1:  # type: ignore[attr-defined]
        return None  # another worker was quicker
    return ClaimedJob(job_id, attempts + 1, request)


def _update_held(session: Session, job: ClaimedJob, values: dict[str, Any]) -> bool:
    """Apply `values` to the job only while this claim still holds it; whether it did."""
    held = session.execute(
        update(Job)
        .where(
            Job.id == job.id,
            Job.state == JobState.RUNNING.value,
            Job.attempts == job.attempt,
        )
        .values(updated_at=utcnow(), **values)
    )
    return bool(held.rowcount == 1)  # type: ignore[attr-defined]


def _finish(
    store: Store,
    job: ClaimedJob,
    values: dict[str, Any],
    write: Callable[[Session], None] | None = None,
) -> bool:
    with store.transaction() as session:
        if not _update_held(session, job, values):
            # Our lease ran out and someone else owns the job now; write nothing.
            logger.warning("job %s attempt %d lost its claim; result dropped", job.id, job.attempt)
            session.rollback()
            return False
        if write is not None:
            write(session)
    return True


def renew(store: Store, job: ClaimedJob, lease_seconds: float) -> bool:
    """Extend the lease of a job still being worked on, so a long job is not taken over by
    another worker while its own is alive. False when the claim is no longer held."""
    with store.transaction() as session:
        lease = utcnow() + timedelta(seconds=lease_seconds)
        return _update_held(session, job, {"lease_expires_at": lease})


def complete(
    store: Store, job: ClaimedJob, result: dict[str, Any], write: Callable[[Session], None]
) -> bool:
    """Mark the job done with `result` and run `write` (storing its detections) in the same
    transaction. Returns False, writing nothing, when the claim is no longer held."""
    return _finish(
        store,
        job,
        # A released attempt's error ("server stopped") is history once the job is done.
        {"state": JobState.DONE.value, "result": result, "error": None, "finished_at": utcnow()},
        write,
    )


def fail(store: Store, job: ClaimedJob, error: str) -> bool:
    """Mark the job failed with `error` (for failures that another attempt would repeat)."""
    return _finish(
        store, job, {"state": JobState.FAILED.value, "error": error, "finished_at": utcnow()}
    )


def release(store: Store, job: ClaimedJob, error: str, refund: bool = False) -> bool:
    """Put the job back in the queue for another attempt.

    refund: the attempt does not count (the job was interrupted by a clean shutdown, not
        failed by the request).
    """
    values: dict[str, Any] = {
        "state": JobState.QUEUED.value,
        "error": error,
        "lease_expires_at": None,
    }
    if refund:
        values["attempts"] = job.attempt - 1
    return _finish(store, job, values)


def get(store: Store, job_id: str) -> Job | None:
    """The job called `job_id`, or None."""
    with store.reading() as session:
        return session.get(Job, job_id)


def counts(store: Store) -> dict[str, int]:
    """Number of jobs in each state (every state present, 0 when none)."""
    with store.reading() as session:
        rows = session.execute(select(Job.state, func.count()).group_by(Job.state)).all()
    found = {state: int(count) for state, count in rows}
    return {state.value: found.get(state.value, 0) for state in JobState}

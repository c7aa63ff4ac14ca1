"""The job queue's guarantees at the storage level, on a real SQLite file and a real
PostgreSQL database."""

from __future__ import annotations

import threading
from collections.abc import Callable

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from assay.schema import DetectRequestItem
from assay.store import Detection, Store, jobs
from assay.store.detections import add_detections
from conftest import both_backends

RESULT = {
    "output_relevance": {
        "instructions_list": [
            {"explanation": "", "follow_probability": 0.9, "instruction": "x", "label": True}
        ],
        "score": 1.0,
    }
}


def _store(database_url: str) -> Store:
    store = Store(database_url)
    store.migrate()
    store.migrate()  # a second run is a no-op
    return store


def _enqueue(store: Store, job_id: str) -> DetectRequestItem:
    item = DetectRequestItem.model_validate(
        {
            "user_query": "q",
            "generated_text": "a",
            "config": {"output_relevance": {}},
            "publish": True,
            "application_name": "app",
            "model_name": "m",
        }
    )
    with store.transaction() as session:
        jobs.enqueue(session, job_id, item.model_dump(mode="json"), "app", "m")
    return item


def _writer(item: DetectRequestItem, job_id: str) -> Callable[[Session], None]:
    def write(session: Session) -> None:
        add_detections(session, item, RESULT, request_id=job_id, job_id=job_id)

    return write


def _detections(store: Store) -> int:
    with store.reading() as session:
        return int(session.execute(select(func.count(Detection.id))).scalar_one())


@both_backends
def test_a_held_job_is_not_claimed_twice(database_url: str) -> None:
    store = _store(database_url)
    _enqueue(store, "job-1")
    [claimed] = jobs.claim(store, limit=5, lease_seconds=60, max_attempts=3)
    assert claimed.attempt == 1
    assert jobs.claim(store, limit=5, lease_seconds=60, max_attempts=3) == []


@both_backends
def test_a_worker_never_takes_over_a_job_it_still_holds(database_url: str) -> None:
    # Under SQLite write load a renewal came late: the same live worker claimed its own job
    # again, dropped the first attempt's result and in the end failed a healthy job.
    store = _store(database_url)
    _enqueue(store, "job-1")
    [held] = jobs.claim(store, limit=1, lease_seconds=-1, max_attempts=3)  # lease already over
    assert jobs.claim(store, limit=1, lease_seconds=60, max_attempts=3, holding={held.id}) == []
    # Another worker (holding nothing) may take it over: the first one may be dead.
    [taken] = jobs.claim(store, limit=1, lease_seconds=60, max_attempts=3)
    assert (taken.id, taken.attempt) == ("job-1", 2)


@both_backends
def test_expired_lease_moves_the_job_and_the_old_claim_cannot_finish(database_url: str) -> None:
    store = _store(database_url)
    item = _enqueue(store, "job-1")
    [first] = jobs.claim(store, limit=1, lease_seconds=-1, max_attempts=3)  # lease already over
    [second] = jobs.claim(store, limit=1, lease_seconds=60, max_attempts=3)
    assert (first.id, second.id) == ("job-1", "job-1")
    assert second.attempt == 2
    assert not jobs.complete(store, first, RESULT, _writer(item, "job-1"))
    assert _detections(store) == 0  # the stale worker wrote nothing
    assert jobs.complete(store, second, RESULT, _writer(item, "job-1"))
    assert not jobs.complete(store, second, RESULT, _writer(item, "job-1"))  # and only once
    assert _detections(store) == 1
    job = jobs.get(store, "job-1")
    assert job is not None and job.state == "done" and job.result == RESULT


@both_backends
def test_a_job_that_keeps_dying_is_failed_after_max_attempts(database_url: str) -> None:
    store = _store(database_url)
    _enqueue(store, "poison")
    for _ in range(2):
        assert jobs.claim(store, limit=1, lease_seconds=-1, max_attempts=2)
    assert jobs.claim(store, limit=1, lease_seconds=-1, max_attempts=2) == []
    job = jobs.get(store, "poison")
    assert job is not None and job.state == "failed" and "2 attempts" in (job.error or "")
    assert jobs.counts(store) == {"queued": 0, "running": 0, "done": 0, "failed": 1}


@both_backends
def test_released_job_is_queued_again(database_url: str) -> None:
    store = _store(database_url)
    _enqueue(store, "job-1")
    [claimed] = jobs.claim(store, limit=1, lease_seconds=60, max_attempts=3)
    assert jobs.release(store, claimed, "boom")
    [again] = jobs.claim(store, limit=1, lease_seconds=60, max_attempts=3)
    assert again.attempt == 2


def test_bad_database_url_is_a_clear_error() -> None:
    try:
        Store("nosuchdb://x")
    except ValueError as error:
        assert "nosuchdb://x" in str(error)
    else:
        raise AssertionError("expected ValueError")


@both_backends
def test_release_after_shutdown_refunds_the_attempt(database_url: str) -> None:
    store = _store(database_url)
    _enqueue(store, "job-1")
    [claimed] = jobs.claim(store, limit=1, lease_seconds=60, max_attempts=3)
    assert jobs.release(store, claimed, "server stopped", refund=True)
    [again] = jobs.claim(store, limit=1, lease_seconds=60, max_attempts=3)
    assert again.attempt == 1
    # Done on the next attempt: the released attempt's error is not reported with the result.
    assert jobs.complete(store, again, {"ok": True}, lambda session: None)
    job = jobs.get(store, "job-1")
    assert job is not None and job.state == "done" and job.error is None


@both_backends
def test_workers_claiming_at_once_take_each_job_exactly_once(database_url: str) -> None:
    # Several workers (threads with their own connections, as replicas would have) poll one
    # queue at the same moment: no job may be handed to two of them.
    store = _store(database_url)
    for n in range(60):
        _enqueue(store, f"job-{n:02d}")
    start = threading.Barrier(4)
    taken: list[list[str]] = [[] for _ in range(4)]

    def work(slot: int) -> None:
        start.wait()
        while claimed := jobs.claim(store, limit=3, lease_seconds=60, max_attempts=3):
            taken[slot] += [job.id for job in claimed]

    threads = [threading.Thread(target=work, args=(slot,)) for slot in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    every = [job_id for ids in taken for job_id in ids]
    assert sorted(every) == [f"job-{n:02d}" for n in range(60)]
    assert jobs.counts(store)["running"] == 60

"""Several `assay serve` processes on one PostgreSQL database: every async job is done exactly
once, a replica killed with SIGKILL loses none of its claimed jobs, and nothing is stored twice."""

from __future__ import annotations

import asyncio
import concurrent.futures
import signal
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import func, select

from assay.detectors.evaluate import detect_items, parse_items
from assay.server.process import ServerProcess
from assay.store import Detection, Job, Store
from assay.store.temporary_postgres import TemporaryPostgres
from conftest import both_backends

from .conftest import API_KEY, AUTH, ServerFactory, followed_result, published

JOBS = 300
PER_REQUEST = 50


def _body(start: int) -> list[dict[str, Any]]:
    return [
        published(
            "replicas",
            generated_text=f"Answer {n}: returns are accepted within {n % 40 + 1} days.",
            async_mode=True,
        )
        for n in range(start, start + PER_REQUEST)
    ]


def _jobs(store: Store) -> dict[str, tuple[str, int]]:
    with store.reading() as session:
        rows = session.execute(select(Job.id, Job.state, Job.attempts)).all()
    return {job_id: (state, attempts) for job_id, state, attempts in rows}


def _running(store: Store) -> dict[str, datetime | None]:
    """The running jobs and when their leases end."""
    with store.reading() as session:
        rows = session.execute(
            select(Job.id, Job.lease_expires_at).where(Job.state == "running")
        ).all()
    return {job_id: lease for job_id, lease in rows}


def _held(replica: ServerProcess) -> int:
    """How many jobs the replica says it holds (its /healthz)."""
    health = httpx.get(replica.url + "/healthz", timeout=30)
    assert health.status_code == 200, f"{health.text}; its log: {replica.log_tail()}"
    count: int = health.json()["worker"]["running"]
    return count


def test_two_replicas_finish_every_job_exactly_once_though_one_is_killed(
    tmp_path: Path, postgres_server: TemporaryPostgres
) -> None:
    url = postgres_server.create_database()
    # A lease long enough that the survivor keeps its own claims on a loaded machine.
    options = ["--job-lease-seconds", "5", "--job-concurrency", "4"]
    replicas = [
        ServerProcess(url, tmp_path / f"replica-{n}.log", api_keys=[API_KEY], extra_args=options)
        for n in range(2)
    ]
    store = Store(url)
    try:
        for replica in replicas:
            replica.start()
        # Submitted through both replicas in turn, as a load balancer would spread them.
        accepted: dict[str, dict[str, Any]] = {}
        for batch, start in enumerate(range(0, JOBS, PER_REQUEST)):
            body = _body(start)
            target = replicas[batch % 2].url
            response = httpx.post(target + "/v2/detect", json=body, headers=AUTH, timeout=120)
            assert response.status_code == 200, response.text
            accepted.update(
                (answer["job_id"], item) for answer, item in zip(response.json(), body, strict=True)
            )
        assert len(accepted) == JOBS

        # Kill one replica mid-way while it holds claimed jobs. Seen holding some on /healthz,
        # it is frozen (SIGSTOP) so that it cannot finish them before the kill: on a fast host a
        # job takes milliseconds, and a replica seen holding jobs could hold none an instant
        # later. Its claims are the jobs that, 2.5 s later, are still running on the same lease:
        # the survivor's jobs have finished or renewed theirs by then (every lease/3 = 1.7 s),
        # and the frozen replica's leases (renewed at most 1.7 s before the stop) last at least
        # 3.3 s more. If it holds none, it is let go and tried again.
        deadline = time.monotonic() + 300
        while True:
            assert time.monotonic() < deadline, "jobs are not being done by both replicas"
            if sum(state == "done" for state, _ in _jobs(store).values()) < JOBS // 3:
                time.sleep(0.1)
                continue
            if _held(replicas[0]) == 0:
                continue
            process = replicas[0].process
            assert process is not None
            process.send_signal(signal.SIGSTOP)
            first = _running(store)
            time.sleep(2.5)
            later = _running(store)
            frozen = {job for job, lease in first.items() if later.get(job) == lease}
            if frozen:
                break
            process.send_signal(signal.SIGCONT)
        replicas[0].kill()
        at_kill = _jobs(store)
        running_at_kill = {j for j, (state, _) in at_kill.items() if state == "running"}
        # Jobs were left to take over (the frozen replica's own; the survivor may have drained
        # the queue in the meantime on a fast host).
        assert frozen <= running_at_kill

        # The survivor finishes everything, the dead replica's claims once their lease ends.
        deadline = time.monotonic() + 600
        while any(state not in ("done", "failed") for state, _ in _jobs(store).values()):
            assert time.monotonic() < deadline, "the surviving replica did not finish the jobs"
            time.sleep(0.2)
        final = _jobs(store)
        assert set(final) == set(accepted)
        assert {state for state, _ in final.values()} == {"done"}
        assert all(attempts <= 2 for _, attempts in final.values())
        retried = {j for j, (_, attempts) in final.items() if attempts == 2}
        # Only the dead replica's claims were taken over.
        assert retried and retried <= running_at_kill, replicas[0].log_tail()

        with store.reading() as session:
            per_job = dict(
                session.execute(
                    select(Detection.job_id, func.count()).group_by(Detection.job_id)
                ).all()
            )
        assert per_job == {job_id: 1 for job_id in accepted}  # one detection each, none twice

        # The same results a single process computes for the same items.
        survivor = replicas[1].url
        sample = sorted(accepted)[:30]
        expected = asyncio.run(detect_items(parse_items([accepted[j] for j in sample])))
        for job_id, result in zip(sample, expected, strict=True):
            job = httpx.get(f"{survivor}/v1/jobs/{job_id}", headers=AUTH, timeout=30).json()
            assert job["result"] == result
    finally:
        for replica in replicas:
            replica.kill()
        store.close()


@both_backends
def test_a_batch_published_to_two_servers_at_once_is_stored_once(
    make_server: ServerFactory, database_url: str
) -> None:
    first = make_server(database_url=database_url)
    second = make_server(database_url=database_url)
    rows = [
        {
            "key": f"row-{n}",
            "user_query": "q",
            "generated_text": f"answer {n}",
            "results": {"output_relevance": followed_result()},
        }
        for n in range(40)
    ]
    body = {"model_name": "m", "run_id": "run-1", "items": rows}
    path = "/v1/applications/shop/detections"
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda server: server.post(body, path=path), [first, second] * 2))
    assert all(answer.status_code == 200 for answer in answers), [a.text for a in answers]
    assert sum(answer.json()["stored"] for answer in answers) == len(rows)
    assert first.count("detections") == len(rows)

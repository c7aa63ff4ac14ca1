"""The replica case for bench/server.py: async jobs through one `assay serve` on SQLite, one on
PostgreSQL, and two on one PostgreSQL database, on the same machine.

On 2 cores two replicas share the same CPU, so the point is the overhead of PostgreSQL and of a
shared queue, and that every job is done exactly once, not more speed.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import func, select

import common
from assay.server.process import ServerProcess
from assay.store import Detection, Store
from assay.store.temporary_postgres import TemporaryPostgres

PER_REQUEST = 50


def _bodies(jobs: int) -> list[list[dict[str, Any]]]:
    rows = common.relevance_rows()
    items = [
        {
            "user_query": rows[n % len(rows)]["query"],
            "generated_text": f"{rows[n % len(rows)]['response']} ({n})",
            "config": {"output_relevance": {}},
            "async_mode": True,
            "application_name": "bench",
            "model_name": "m",
        }
        for n in range(jobs)
    ]
    return [items[start : start + PER_REQUEST] for start in range(0, jobs, PER_REQUEST)]


def _run(url: str, replicas: int, jobs: int, api_key: str, folder: Path) -> dict[str, float]:
    """Jobs/s from the first submission until every job is done, and the detections stored."""
    servers = [
        ServerProcess(url, folder / f"replica-{n}.log", api_keys=[api_key]) for n in range(replicas)
    ]
    store = Store(url)
    headers = {"Authorization": f"Bearer {api_key}"}
    try:
        for server in servers:
            server.start()
        started = time.perf_counter()
        for index, body in enumerate(_bodies(jobs)):
            target = servers[index % replicas].url
            response = httpx.post(target + "/v2/detect", json=body, headers=headers, timeout=300)
            response.raise_for_status()
        while True:
            counts = httpx.get(servers[0].url + "/healthz", timeout=30).json()["jobs"]
            if counts["done"] + counts["failed"] >= jobs:
                break
            time.sleep(0.1)
        elapsed = time.perf_counter() - started
        with store.reading() as session:
            stored = session.execute(select(func.count(Detection.id))).scalar_one()
            per_job = session.execute(
                select(func.count(func.distinct(Detection.job_id)))
            ).scalar_one()
    finally:
        for server in servers:
            server.stop()
        store.close()
    return {"rate": jobs / elapsed, "done": counts["done"], "stored": stored, "jobs": per_job}


def measure(api_key: str, jobs: int) -> dict[str, dict[str, float]]:
    cases: dict[str, tuple[int, Callable[[TemporaryPostgres], str]]] = {}
    figures: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as folder, TemporaryPostgres() as postgres:
        cases = {
            "1 replica, SQLite": (1, lambda _: f"sqlite:///{Path(folder) / 'bench.db'}"),
            "1 replica, PostgreSQL": (1, lambda pg: pg.create_database()),
            "2 replicas, one PostgreSQL database": (2, lambda pg: pg.create_database()),
        }
        for name, (replicas, make_url) in cases.items():
            figures[name] = _run(make_url(postgres), replicas, jobs, api_key, Path(folder))
    return figures


def table(figures: dict[str, dict[str, float]]) -> str:
    baseline = next(iter(figures.values()))["rate"]
    lines = [
        "| case | jobs done | detections stored (distinct jobs) | jobs/s | ÷ 1 replica on SQLite |",
        "|---|---|---|---|---|",
    ]
    for name, numbers in figures.items():
        lines.append(
            f"| {name} | {numbers['done']:.0f} | {numbers['stored']:.0f} ({numbers['jobs']:.0f}) | "
            f"{numbers['rate']:.1f} | {numbers['rate'] / baseline:.2f}× |"
        )
    return "\n".join(lines)

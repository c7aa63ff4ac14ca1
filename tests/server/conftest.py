"""Fixtures for server tests: a real Assay server on a loopback port with a real database (a
SQLite file, or PostgreSQL in tests marked `both_backends`).

`live_server` runs the app with uvicorn in a thread of this process, so tests can register
fault-injection judges that the server then uses. Tests that must kill the server use
`assay.server.process.ServerProcess` instead.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI
from sqlalchemy import text

from assay.detectors import DETECTORS
from assay.judges import Judge, Question, Verdict, register_judge
from assay.schema import JudgeFailure
from assay.server import ServerSettings, create_app
from assay.server.process import free_port
from assay.store import Store

API_KEY = "test-key"
AUTH = {"Authorization": f"Bearer {API_KEY}"}


@dataclass
class LiveServer:
    """A running server: its base URL, the app (for its state), its database's URL and, on
    SQLite, the database file."""

    url: str
    app: FastAPI
    database: Path
    database_url: str = ""

    def count(self, table: str) -> int:
        """Rows in `table` of the server's database."""
        return count_rows(self.database_url, table)

    def post(self, body: Any, path: str = "/v2/detect", **kwargs: Any) -> httpx.Response:
        headers = {**AUTH, **kwargs.pop("headers", {})}
        return httpx.post(self.url + path, json=body, headers=headers, timeout=120, **kwargs)

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        headers = {**AUTH, **kwargs.pop("headers", {})}
        return httpx.get(self.url + path, headers=headers, timeout=60, **kwargs)

    def wait_for_job(self, job_id: str, timeout: float = 60.0) -> dict[str, Any]:
        """Poll `/v1/jobs/{id}` until the job is done or failed."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            job: dict[str, Any] = self.get(f"/v1/jobs/{job_id}").json()
            if job["state"] in ("done", "failed"):
                return job
            time.sleep(0.05)
        raise AssertionError(f"job {job_id} did not finish within {timeout}s")


def count_rows(database_url: str, table: str) -> int:
    """Rows in `table` of the database at `database_url` (any backend)."""
    store = Store(database_url)
    try:
        with store.reading() as session:
            return int(session.execute(text(f"SELECT COUNT(*) FROM {table}")).scalar_one())
    finally:
        store.close()


def serve_app(settings: ServerSettings, database: Path) -> Iterator[LiveServer]:
    app = create_app(settings)
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 180
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("test server did not start")
        time.sleep(0.05)
    try:
        yield LiveServer(f"http://127.0.0.1:{port}", app, database, settings.database_url or "")
    finally:
        server.should_exit = True
        thread.join(timeout=30)


ServerFactory = Callable[..., LiveServer]


@pytest.fixture
def make_server(
    tmp_path: Path, backend: str, new_database: Callable[[], str]
) -> Iterator[ServerFactory]:
    """Start servers with settings overrides, e.g. `make_server(max_in_flight=1)`; each gets
    its own database (a SQLite file unless the test runs on PostgreSQL) and is stopped at the
    end of the test."""
    running: list[Iterator[LiveServer]] = []

    def start(**overrides: Any) -> LiveServer:
        database = tmp_path / f"assay-{len(running)}.db"
        url = new_database() if backend == "postgresql" else f"sqlite:///{database}"
        settings = ServerSettings(database_url=url, api_keys=frozenset({API_KEY}))
        generator = serve_app(replace(settings, **overrides), database)
        running.append(generator)
        return next(generator)

    yield start
    for generator in reversed(running):
        next(generator, None)


@pytest.fixture
def live_server(make_server: ServerFactory) -> LiveServer:
    """A server with default settings and API key `test-key`."""
    return make_server()


class GatedJudge(Judge):
    """Fault injection: holds every call until the test opens the gate."""

    name = "gated"

    def __init__(self) -> None:
        self.gate = threading.Event()

    async def answer(self, questions: Sequence[Question]) -> list[Verdict | JudgeFailure]:
        # Polled rather than waited on in a thread, so that cancelling the caller ends it.
        while not self.gate.is_set():
            await asyncio.sleep(0.01)
        return [Verdict(0.9, "ok") for _ in questions]


@pytest.fixture
def gated_judge() -> Iterator[GatedJudge]:
    judge = GatedJudge()
    register_judge("gated", lambda: judge)
    yield judge
    judge.gate.set()


def relevance_item(**fields: Any) -> dict[str, Any]:
    """A valid output_relevance request item; `fields` override or add fields."""
    item: dict[str, Any] = {
        "user_query": "What is your return policy?",
        "generated_text": "Our return policy allows returns within 30 days of purchase.",
        "config": {"output_relevance": {"detector_name": "default", "explain": True}},
    }
    item.update(fields)
    return item


def published(application: str = "shop", model: str = "model-a", **fields: Any) -> dict[str, Any]:
    """A relevance item with publish on, under `application`/`model`."""
    return relevance_item(publish=True, application_name=application, model_name=model, **fields)


def followed_result(detector: str = "output_relevance") -> dict[str, Any]:
    """A result `detector` could give, for publishing: every instruction followed."""
    return {
        "instructions_list": [
            {"explanation": "", "follow_probability": 0.9, "instruction": i.text, "label": True}
            for i in DETECTORS[detector].instructions
        ],
        "score": 1.0,
    }

"""Reliability under hostile use: `assay serve` and `assay run` as a hostile client would try them.

Everything runs on loopback against a real `assay serve` subprocess (SQLite file, embedded
judge) and real `assay run` calls, and prints the "Reliability" table of bench/RESULTS.md:

- the hostile-input table of the test suite (tests/server/hostile_cases.py) and the Hypothesis
  fuzzer's bodies and queries (tests/server/fuzz_bodies.py), derandomized: statuses, 5xx count;
- one poisoned item among concurrent valid ones (sync requests, async jobs, an `assay run` batch);
- async jobs through repeated SIGKILLs of the server: lost or duplicated jobs;
- 64 connections that send headers and a few body bytes, then nothing: does scoring go on;
- one async job stuck on a silent LLM endpoint: do other jobs wait for it.

    python bench/reliability.py [--jobs 1200] [--kills 3] [--fuzz 500]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

import common
from assay.server.process import ServerProcess

sys.path.insert(0, str(common.ROOT / "tests" / "server"))
import fuzz_bodies  # noqa: E402  (test-suite modules, shared so both count the same cases)
import hostile_cases  # noqa: E402

KEY = hostile_cases.KEY
AUTH = hostile_cases.AUTH
POISON = "x \ud800"


def start_server(
    folder: Path, name: str, *extra: str, env: dict[str, str] | None = None
) -> ServerProcess:
    server = ServerProcess(
        f"sqlite:///{folder / (name + '.db')}",
        folder / f"{name}.log",
        api_keys=[KEY],
        extra_args=list(extra),
    )
    saved = dict(os.environ)
    os.environ.update(env or {})
    try:
        server.start()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return server


# --- hostile table and fuzzer ------------------------------------------------------------------


def hostile_table(url: str) -> dict[str, int]:
    documented = five_hundreds = 0
    with httpx.Client(base_url=url, timeout=120) as http:
        for case in hostile_cases.CASES:
            headers = dict(case.headers)
            if case.body is None:
                response = http.get(case.path, params=case.params, headers=headers)
            else:
                response = http.post(case.path, content=case.body, headers=headers)
            five_hundreds += response.status_code >= 500
            answer = response.json()
            matches = response.status_code == case.status and (
                case.status < 400
                or (
                    answer == {"message": answer["message"], "status": case.status}
                    and case.message in answer["message"]
                )
            )
            documented += matches
            if not matches:
                print(
                    f"  not as documented: {case.name}: {response.status_code} {response.text[:200]}"
                )
    return {"tried": len(hostile_cases.CASES), "documented": documented, "5xx": five_hundreds}


def fuzz(url: str, examples: int) -> dict[str, int]:
    from hypothesis import HealthCheck, given, settings

    statuses: collections.Counter[int] = collections.Counter()
    malformed = not_serving = 0
    fuzz_settings = settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    valid = json.dumps([fuzz_bodies.valid_item()]).encode()
    with httpx.Client(base_url=url, headers=AUTH, timeout=120) as http:
        seeded = fuzz_bodies.valid_item() | {
            "publish": True,
            "application_name": "shop",
            "model_name": "m",
        }
        http.post("/v2/detect", json=[seeded])

        def record(response: httpx.Response) -> None:
            nonlocal malformed
            statuses[response.status_code] += 1
            if response.status_code >= 400:
                answer = response.json()
                malformed += answer != {
                    "message": answer.get("message"),
                    "status": response.status_code,
                }

        @fuzz_settings
        @given(fuzz_bodies.encoded_bodies())
        def bodies(body: bytes) -> None:
            nonlocal not_serving
            record(
                http.post("/v2/detect", content=body, headers={"Content-Type": "application/json"})
            )
            after = http.post(
                "/v2/detect", content=valid, headers={"Content-Type": "application/json"}
            )
            not_serving += after.status_code != 200

        @fuzz_settings
        @given(fuzz_bodies.queries)
        def queries(query: tuple[str, str, dict[str, str]]) -> None:
            route, name, params = query
            record(http.get(f"/v1/applications/{name}/{route}", params=params))

        bodies()
        queries()
    tried = sum(statuses.values())
    five_hundreds = sum(count for status, count in statuses.items() if status >= 500)
    return {
        "tried": tried,
        "documented": tried - five_hundreds - malformed,
        "5xx": five_hundreds,
        "not_serving": not_serving,
        "statuses": dict(sorted(statuses.items())),  # type: ignore[dict-item]
    }


# --- poisoned batches ---------------------------------------------------------------------------


def _answer(n: int, **fields: Any) -> dict[str, Any]:
    return hostile_cases.item(generated_text=f"Returns are accepted within {n} days.") | fields


async def _concurrently(url: str, bodies: list[list[dict[str, Any]]]) -> list[httpx.Response]:
    limits = httpx.Limits(max_connections=len(bodies))
    async with httpx.AsyncClient(base_url=url, headers=AUTH, timeout=300, limits=limits) as http:
        return list(
            await asyncio.gather(
                *(
                    http.post(
                        "/v2/detect",
                        content=json.dumps(body).encode(),
                        headers={"Content-Type": "application/json"},
                    )
                    for body in bodies
                )
            )
        )


def poisoned_requests(url: str) -> dict[str, int]:
    bodies = [[_answer(n)] for n in range(100)]
    bodies.insert(50, [_answer(0, generated_text=POISON)])
    responses = asyncio.run(_concurrently(url, bodies))
    failed = [n for n, r in enumerate(responses) if r.status_code != 200]
    return {"items": len(bodies), "failed": len(failed), "innocent_failed": len(set(failed) - {50})}


def poisoned_jobs(url: str) -> dict[str, int]:
    app = {"publish": True, "async_mode": True, "application_name": "poison", "model_name": "m"}
    bodies = [[_answer(n, **app)] for n in range(20)]
    bodies.append([_answer(0, generated_text=POISON, **app)])
    responses = asyncio.run(_concurrently(url, bodies))
    ids = [r.json()[0]["job_id"] for r in responses if r.status_code == 200]
    states = [_wait_for_job(url, job_id)["state"] for job_id in ids]
    return {
        "items": len(bodies),
        "refused": len(bodies) - len(ids),
        "jobs_failed": states.count("failed"),
    }


def _wait_for_job(url: str, job_id: str, timeout: float = 300) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job: dict[str, Any] = httpx.get(f"{url}/v1/jobs/{job_id}", headers=AUTH, timeout=60).json()
        if job["state"] in ("done", "failed"):
            return job
        time.sleep(0.1)
    raise RuntimeError(f"job {job_id} did not finish")


def poisoned_run(folder: Path) -> dict[str, int]:
    rows = [{"id": f"r{n}", **_answer(n)} for n in range(17)]
    rows[8]["generated_text"] = POISON
    rows[8]["id"] = "bad \udc80"
    for row in rows:
        row.pop("config")
    data = folder / "poisoned.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    out = folder / "poisoned.scored.jsonl"
    assay = Path(sys.executable).with_name("assay")
    finished = subprocess.run(
        [str(assay), "run", str(data), "--out", str(out), "--batch-size", "17"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    failed = [
        n for n, line in enumerate(lines) if "error" in line or "output_relevance" not in line
    ]
    return {
        "rows": len(rows),
        "exit": finished.returncode,
        "failed": len(failed),
        "innocent_failed": len(set(failed) - {8}),
    }


# --- SIGKILLs ----------------------------------------------------------------------------------


def _job_states(database: Path) -> dict[str, str]:
    with sqlite3.connect(database, timeout=60) as connection:
        return dict(connection.execute("SELECT id, state FROM jobs").fetchall())


def sigkill_cycles(folder: Path, total: int, kills: int) -> dict[str, int]:
    database = folder / "kills.db"
    server = start_server(folder, "kills", "--job-lease-seconds", "2")
    app = {"publish": True, "async_mode": True, "application_name": "kills", "model_name": "m"}
    accepted: list[str] = []
    for start in range(0, total, 100):
        body = [_answer(n, **app) for n in range(start, min(start + 100, total))]
        response = httpx.post(server.url + "/v2/detect", json=body, headers=AUTH, timeout=300)
        response.raise_for_status()
        accepted += [entry["job_id"] for entry in response.json()]
    step = total // (kills + 1)
    killed = mid_run = 0
    while killed < kills:
        target = step * (killed + 1)
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            states = _job_states(database)
            if sum(state == "done" for state in states.values()) >= target:
                break
            time.sleep(0.2)
        server.kill()  # SIGKILL, jobs running
        mid_run += sum(state == "running" for state in _job_states(database).values())
        killed += 1
        server = start_server(folder, "kills", "--job-lease-seconds", "2")
    deadline = time.monotonic() + 1800
    while time.monotonic() < deadline:
        states = _job_states(database)
        if sum(state in ("done", "failed") for state in states.values()) == total:
            break
        time.sleep(0.5)
    server.stop()
    states = _job_states(database)
    with sqlite3.connect(database) as connection:
        per_job = dict(
            connection.execute(
                "SELECT job_id, COUNT(*) FROM detections WHERE job_id IS NOT NULL GROUP BY job_id"
            ).fetchall()
        )
    lost = [j for j in accepted if j not in states or states[j] != "done" or j not in per_job]
    duplicated = [j for j, count in per_job.items() if count > 1]
    return {
        "jobs": len(accepted),
        "kills": kills,
        "mid_run": mid_run,
        "lost": len(lost),
        "duplicated": len(duplicated),
    }


# --- slow clients and slow jobs -----------------------------------------------------------------


@contextlib.contextmanager
def held_connections(url: str, count: int) -> Iterator[list[socket.socket]]:
    port = int(url.rsplit(":", 1)[1])
    sockets = []
    try:
        for _ in range(count):
            connection = socket.create_connection(("127.0.0.1", port), timeout=60)
            connection.sendall(
                b"POST /v2/detect HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                + f"Authorization: {AUTH['Authorization']}\r\n".encode()
                + b'Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n[{"gen'
            )
            sockets.append(connection)
        yield sockets
    finally:
        for connection in sockets:
            connection.close()


def slow_clients(url: str, held: int = 64, requests: int = 20) -> dict[str, int]:
    statuses: collections.Counter[int] = collections.Counter()
    timed_out = 0
    with held_connections(url, held) as connections:
        time.sleep(1.0)  # let every held request reach the server
        for n in range(requests):
            response = httpx.post(url + "/v2/detect", json=[_answer(n)], headers=AUTH, timeout=120)
            statuses[response.status_code] += 1
        for connection in connections:
            with contextlib.suppress(OSError):
                timed_out += connection.recv(64).startswith(b"HTTP/1.1 408")
    return {
        "held": held,
        "requests": requests,
        "ok": statuses[200],
        "busy": statuses[429],
        "held_got_408": timed_out,
    }


class SilentEndpoint:
    """A loopback TCP server that accepts connections and never answers (a hung LLM)."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                self.held.append(self.listener.accept()[0])

    def close(self) -> None:
        self.listener.close()
        for connection in self.held:
            connection.close()


def slow_job(folder: Path, ordinary: int = 20) -> dict[str, Any]:
    silent = SilentEndpoint()
    env = {
        "ASSAY_LLM_BASE_URL": f"http://127.0.0.1:{silent.port}/v1",
        "ASSAY_LLM_MODEL": "silent",
        "ASSAY_LLM_CACHE": "false",
        "ASSAY_LLM_MAX_ATTEMPTS": "1",
    }
    server = start_server(folder, "slowjob", env=env)
    try:
        app = {"publish": True, "async_mode": True, "application_name": "slow", "model_name": "m"}
        stuck = _answer(0, config={"output_relevance": {"judge": "openai"}}, **app)
        stuck_id = httpx.post(
            server.url + "/v2/detect", json=[stuck], headers=AUTH, timeout=60
        ).json()[0]["job_id"]
        while (
            httpx.get(f"{server.url}/v1/jobs/{stuck_id}", headers=AUTH).json()["state"] != "running"
        ):
            time.sleep(0.05)
        started = time.perf_counter()
        body = [_answer(n, **app) for n in range(1, ordinary + 1)]
        ids = [
            e["job_id"]
            for e in httpx.post(
                server.url + "/v2/detect", json=body, headers=AUTH, timeout=60
            ).json()
        ]
        done = [_wait_for_job(server.url, job_id)["state"] for job_id in ids].count("done")
        elapsed = time.perf_counter() - started
        stuck_state = httpx.get(f"{server.url}/v1/jobs/{stuck_id}", headers=AUTH).json()["state"]
    finally:
        server.stop()
        silent.close()
    return {"ordinary": ordinary, "done": done, "seconds": elapsed, "stuck_state": stuck_state}


# --- the table ---------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=1200, help="async jobs through the SIGKILLs")
    parser.add_argument("--kills", type=int, default=3, help="SIGKILLs of the server")
    parser.add_argument(
        "--fuzz", type=int, default=500, help="fuzzer examples (bodies, and queries)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        server = start_server(folder, "main", "--max-in-flight", "128")
        try:
            hostile = hostile_table(server.url)
            fuzzed = fuzz(server.url, args.fuzz)
            requests = poisoned_requests(server.url)
            jobs = poisoned_jobs(server.url)
        finally:
            server.stop()
        lockout_server = start_server(folder, "lockout")
        try:
            lockout = slow_clients(lockout_server.url)
        finally:
            lockout_server.stop()
        run = poisoned_run(folder)
        stalled = slow_job(folder)
        kills = sigkill_cycles(folder, args.jobs, args.kills)

    rows = [
        (
            "Hostile-input table (tests/server/hostile_cases.py)",
            f"{hostile['tried']} requests",
            f"{hostile['documented']} answered as documented; {hostile['5xx']} got 5xx",
        ),
        (
            "Fuzzer: detect bodies and read queries (Hypothesis, derandomized)",
            f"{fuzzed['tried']} requests",
            f"{fuzzed['5xx']} got 5xx; {fuzzed['tried'] - fuzzed['documented'] - fuzzed['5xx']} malformed errors; "
            f"valid request after each body failed {fuzzed['not_serving']} times; statuses {fuzzed['statuses']}",
        ),
        (
            "Poisoned item among concurrent requests (lone surrogate)",
            f"{requests['items']} requests at once",
            f"blast radius {requests['failed']} (the poisoned one, 422); {requests['innocent_failed']} others failed",
        ),
        (
            "Poisoned item among async jobs",
            f"{jobs['items']} items",
            f"{jobs['refused']} refused (422, the poisoned one); {jobs['jobs_failed']} jobs failed",
        ),
        (
            "Poisoned row in one `assay run` batch (lone surrogates in id and text)",
            f"{run['rows']} rows, batch of 17",
            f"exit {run['exit']}; {run['failed']} row failed; {run['innocent_failed']} others failed",
        ),
        (
            "SIGKILLs of `assay serve` with async jobs in flight",
            f"{kills['jobs']} jobs, {kills['kills']} SIGKILLs",
            f"{kills['mid_run']} jobs were mid-run at a kill; {kills['lost']} lost, {kills['duplicated']} duplicated",
        ),
        (
            "Slow clients: connections sending headers and 6 body bytes, then nothing",
            f"{lockout['held']} held, {lockout['requests']} scoring requests meanwhile",
            f"{lockout['ok']} scored, {lockout['busy']} got 429; {lockout['held_got_408']} held got 408 after 10 s",
        ),
        (
            "One async job stuck on a silent LLM endpoint",
            f"{stalled['ordinary']} ordinary jobs queued behind it",
            f"{stalled['done']} done in {stalled['seconds']:.1f} s while it was still {stalled['stuck_state']}",
        ),
    ]
    lines = ["| check | tried | outcome |", "|---|---|---|"]
    lines += [f"| {check} | {tried} | {outcome} |" for check, tried, outcome in rows]
    table = "\n".join(lines)
    print(table)
    common.write_section(
        "Reliability",
        f"`python bench/reliability.py --jobs {args.jobs} --kills {args.kills} --fuzz {args.fuzz}` on this "
        f"machine ({os.cpu_count()} cores, shared): `assay serve` subprocesses on loopback with SQLite "
        "files and the embedded judge (`--max-in-flight 128` for the hostile table, fuzzer and "
        "poisoned requests, so 101 concurrent requests are all judged; defaults otherwise), and "
        "`assay run`. Targets (issue 12): no 5xx over the hostile table and the fuzzer, a blast "
        "radius of 1, no job lost or duplicated, scoring while 64 slow clients hold connections.\n\n"
        + table,
    )


if __name__ == "__main__":
    main()

"""No request harms another: a poisoned item fails alone, held-open connections cannot lock out
scoring, one slow job delays no other, and judging is bounded in time."""

from __future__ import annotations

import asyncio
import json
import socket
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from .conftest import AUTH, GatedJudge, LiveServer, ServerFactory, published, relevance_item

POISON = "x \ud800"  # a lone surrogate, sent as the JSON escape a hostile client would send


def _post_raw(client: httpx.AsyncClient, items: list[dict[str, Any]]) -> Any:
    body = json.dumps(items, ensure_ascii=True).encode("ascii")
    return client.post("/v2/detect", content=body, headers={"Content-Type": "application/json"})


async def _concurrently(url: str, bodies: list[list[dict[str, Any]]]) -> list[httpx.Response]:
    limits = httpx.Limits(max_connections=len(bodies))
    async with httpx.AsyncClient(base_url=url, headers=AUTH, timeout=300, limits=limits) as client:
        return list(await asyncio.gather(*(_post_raw(client, body) for body in bodies)))


def _answer(n: int) -> dict[str, Any]:
    return relevance_item(generated_text=f"Returns are accepted within {n} days of purchase.")


def test_one_poisoned_request_among_a_hundred_fails_alone(make_server: ServerFactory) -> None:
    """A lone surrogate once made the tokenizer fail the whole micro-batch: 83 of 100
    concurrent valid requests got 503. Now the poisoned request is a 422 and no other fails."""
    live_server = make_server(max_in_flight=128)  # all 101 at once, none turned away with 429
    bodies = [[_answer(n)] for n in range(100)]
    bodies.insert(37, [_answer(999) | {"generated_text": POISON}])
    responses = asyncio.run(_concurrently(live_server.url, bodies))

    poisoned = responses.pop(37)
    assert poisoned.status_code == 422
    assert poisoned.json()["message"].startswith("[0].generated_text: holds a lone surrogate")
    assert [r.status_code for r in responses] == [200] * 100
    # Batched with strangers or not, each answer is what the item gets on its own.
    for n in (0, 50, 99):
        alone = live_server.post([_answer(n)]).json()
        assert responses[n].json() == alone


def test_a_poisoned_async_item_fails_no_job(live_server: LiveServer) -> None:
    """Three of 20 unrelated async jobs once ended `failed` for good."""
    bodies = [
        [published(async_mode=True, generated_text=f"Refunds in {n} days.")] for n in range(20)
    ]
    bodies.append([published(async_mode=True, generated_text=POISON)])
    responses = asyncio.run(_concurrently(live_server.url, bodies))
    assert responses[-1].status_code == 422
    job_ids = [r.json()[0]["job_id"] for r in responses[:-1]]
    jobs = [live_server.wait_for_job(job_id) for job_id in job_ids]
    assert [job["state"] for job in jobs] == ["done"] * 20
    assert all(job["attempts"] == 1 for job in jobs)


@contextmanager
def held_connections(server: LiveServer, count: int) -> Iterator[list[socket.socket]]:
    """`count` connections that send a detect request's headers and 6 bytes of a 1000-byte
    body, then nothing more."""
    port = int(server.url.rsplit(":", 1)[1])
    sockets = []
    try:
        for _ in range(count):
            connection = socket.create_connection(("127.0.0.1", port), timeout=30)
            connection.sendall(
                b"POST /v2/detect HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                + f"Authorization: {AUTH['Authorization']}\r\n".encode()
                + b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
                + b'[{"gen'
            )
            sockets.append(connection)
        yield sockets
    finally:
        for connection in sockets:
            connection.close()


def _unanswered(connection: socket.socket) -> bool:
    connection.setblocking(False)
    try:
        return not connection.recv(1)
    except BlockingIOError:
        return True
    finally:
        connection.setblocking(True)


def test_held_open_connections_cannot_lock_out_scoring(make_server: ServerFactory) -> None:
    """64 slow clients once took every in-flight slot: all scoring got 429 while they stayed."""
    server = make_server(max_in_flight=64, body_timeout_seconds=120)
    with held_connections(server, 64) as held:
        # Every held request has reached the server and is waiting for its body.
        deadline = time.monotonic() + 30
        while _open_connections(server) < 64 and time.monotonic() < deadline:
            time.sleep(0.05)
        for n in range(3):
            response = server.post([_answer(n)])
            assert response.status_code == 200, response.text
        assert server.app.state.in_flight == 0  # slow bodies hold no slot
        assert all(_unanswered(connection) for connection in held)  # still held meanwhile


def _open_connections(server: LiveServer) -> int:
    port = int(server.url.rsplit(":", 1)[1])
    with open("/proc/net/tcp", encoding="ascii") as table:
        rows = [line.split() for line in table.readlines()[1:]]
    # Established (state 01) connections whose local end is the server's port.
    return sum(1 for row in rows if row[1].endswith(f":{port:04X}") and row[3] == "01")


def test_a_body_that_stops_arriving_gets_408(make_server: ServerFactory) -> None:
    server = make_server(body_timeout_seconds=0.5)
    with held_connections(server, 2) as held:
        for connection in held:
            answer = b""
            while b"}" not in answer:
                chunk = connection.recv(4096)
                assert chunk, f"connection closed without an answer: {answer!r}"
                answer += chunk
            head, _, body = answer.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 408")
            error = json.loads(body)
            assert error["status"] == 408 and "body not received within 0.5 s" in error["message"]
    assert server.post([_answer(1)]).status_code == 200


def test_a_client_that_leaves_mid_body_is_no_server_error(
    live_server: LiveServer, caplog: pytest.LogCaptureFixture
) -> None:
    # Each such client logged two tracebacks ("unexpected error", "Exception in ASGI
    # application"): anyone could fill the server's log.
    port = int(live_server.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port)) as connection:
        connection.sendall(
            b"POST /v2/detect HTTP/1.1\r\nHost: x\r\nAuthorization: "
            + AUTH["Authorization"].encode()
            + b"\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n[{"
        )
        time.sleep(0.3)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not live_server.post([_answer(1)]).is_success:
        time.sleep(0.1)
    time.sleep(0.3)  # the server notices the closed connection
    assert not [r for r in caplog.records if r.levelname == "ERROR"], caplog.text
    assert live_server.post([_answer(1)]).status_code == 200


def test_one_slow_async_job_delays_no_other(
    live_server: LiveServer, gated_judge: GatedJudge
) -> None:
    """One job on a silent judge once held the worker until it finished: 20 ordinary jobs
    waited for it. Now a new job is claimed whenever a slot frees."""
    slow = published(async_mode=True, config={"output_relevance": {"judge": "gated"}})
    slow_id = live_server.post([slow]).json()[0]["job_id"]
    deadline = time.monotonic() + 30
    while live_server.get(f"/v1/jobs/{slow_id}").json()["state"] != "running":
        assert time.monotonic() < deadline, "the slow job never started"
        time.sleep(0.02)

    body = [published(async_mode=True, generated_text=f"Refunds in {n} days.") for n in range(20)]
    job_ids = [item["job_id"] for item in live_server.post(body).json()]
    jobs = [live_server.wait_for_job(job_id) for job_id in job_ids]

    assert [job["state"] for job in jobs] == ["done"] * 20
    assert live_server.get(f"/v1/jobs/{slow_id}").json()["state"] == "running"
    gated_judge.gate.set()
    assert live_server.wait_for_job(slow_id)["state"] == "done"


def test_judging_is_bounded_in_time(make_server: ServerFactory, gated_judge: GatedJudge) -> None:
    server = make_server(judge_timeout_seconds=0.5)
    stuck = {"output_relevance": {"judge": "gated"}}

    strict = server.post([published(config=stuck)])
    assert strict.status_code == 503
    assert "timeout: not judged within 0.5 s" in strict.json()["message"]

    lenient = server.post([published(config=stuck, must_compute="ignore_failures")])
    assert lenient.status_code == 200
    [result] = lenient.json()
    assert result["output_relevance"] == {
        "error": True,
        "kind": "timeout",
        "message": "not judged within 0.5 s",
    }
    with sqlite3.connect(server.database) as connection:
        stored = connection.execute("SELECT score, error FROM detections").fetchall()
    assert stored == [(None, "not judged within 0.5 s")]  # only the lenient item, as an error

    job_id = server.post([published(config=stuck, async_mode=True)]).json()[0]["job_id"]
    job = server.wait_for_job(job_id)
    assert job["state"] == "failed" and "not judged within 0.5 s" in job["error"]

"""`client.jobs.retrieve` and `client.jobs.wait` over HTTP, sync and async, against a real
server on loopback (the gated judge holds a job running, to show `wait` giving up)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from assay import APITimeoutError, AsyncClient, Client, JobWaitTimeout, NotFoundError

from .conftest import API_KEY, GatedJudge, LiveServer, relevance_item

AUTH = f"Bearer {API_KEY}"


def async_item(**config: object) -> dict[str, object]:
    return relevance_item(
        async_mode=True,
        application_name="shop",
        model_name="model-a",
        config={"output_relevance": {"detector_name": "default", "explain": True, **config}},
    )


def test_a_sync_client_waits_for_a_job_and_gets_its_result(live_server: LiveServer) -> None:
    with Client(base_url=live_server.url, auth_header=AUTH) as client:
        [ack] = client.inference.detect(body=[async_item()])
        job = client.jobs.wait(ack.job_id, timeout=60, poll_interval=0.05)
        again = client.jobs.retrieve(ack.job_id)
        with pytest.raises(NotFoundError):
            client.jobs.retrieve("00000000-0000-0000-0000-000000000000")

    assert job.state == "done" and job.id == ack.job_id
    assert set(job.result) == {"output_relevance"}
    assert job.result.output_relevance["instructions_list"]
    assert again == job
    # The server's own answer, unchanged.
    assert again == {**live_server.get(f"/v1/jobs/{ack.job_id}").json(), "result": job.result}


async def test_an_async_client_waits_too(live_server: LiveServer) -> None:
    async with AsyncClient(base_url=live_server.url, auth_header=AUTH) as client:
        [ack] = await client.inference.detect(body=[async_item()])
        job = await client.jobs.wait(ack.job_id, timeout=60, poll_interval=0.05)

    assert job.state == "done" and job.result.output_relevance["score"] >= 0


def test_wait_gives_up_with_the_job_as_last_seen(
    live_server: LiveServer, gated_judge: GatedJudge
) -> None:
    with Client(base_url=live_server.url, auth_header=AUTH) as client:
        [ack] = client.inference.detect(body=[async_item(judge="gated")])
        with pytest.raises(JobWaitTimeout) as caught:
            client.jobs.wait(ack.job_id, timeout=0.3, poll_interval=0.05)
        gated_judge.gate.set()
        finished = client.jobs.wait(ack.job_id, timeout=60, poll_interval=0.05)

    assert caught.value.job["state"] in ("queued", "running")
    assert f"job {ack.job_id!r} is still" in str(caught.value)
    assert finished.state == "done"


class _HangingAfterFirstPoll(BaseHTTPRequestHandler):
    """Answers the first GET with a running job, then holds every later one unanswered."""

    polls = 0
    release = threading.Event()

    def do_GET(self) -> None:
        type(self).polls += 1
        if type(self).polls > 1:
            self.release.wait(timeout=30)
            return
        data = json.dumps({"id": "j1", "state": "running", "result": None}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.mark.parametrize("answers_first_poll", [True, False])
def test_a_poll_the_server_does_not_answer_ends_with_the_wait(answers_first_poll: bool) -> None:
    # Each poll (its retries included) gets only the time the wait has left: a server that
    # stops answering cannot stretch a 0.5 s wait to three 20 s request timeouts.
    _HangingAfterFirstPoll.polls = 0 if answers_first_poll else 1
    _HangingAfterFirstPoll.release = threading.Event()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _HangingAfterFirstPoll)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with Client(base_url=url, auth_header=AUTH, timeout=20, max_retries=2) as client:
            expected = JobWaitTimeout if answers_first_poll else APITimeoutError
            with pytest.raises(expected) as caught:
                client.jobs.wait("j1", timeout=0.5, poll_interval=0.05)
    finally:
        _HangingAfterFirstPoll.release.set()
        server.shutdown()
        server.server_close()

    if answers_first_poll:  # the job as last seen
        assert isinstance(caught.value, JobWaitTimeout)
        assert caught.value.job["state"] == "running"
    else:
        assert "did not answer within the wait's 0.5 s" in str(caught.value)

"""`client.jobs.retrieve` and `client.jobs.wait` over HTTP, sync and async, against a real
server on loopback (the gated judge holds a job running, to show `wait` giving up)."""

from __future__ import annotations

import pytest

from assay import AsyncClient, Client, JobWaitTimeout, NotFoundError

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

"""The Python API around results: async jobs in-process, short reprs, and data frames
(`to_pandas()`, with pandas an optional extra)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from assay import (
    AsyncClient,
    Client,
    Detect,
    DetectResponse,
    DetectResponseItem,
    Job,
    NotFoundError,
    RequestValidationError,
)
from assay import client as client_module
from assay.runner import run_file
from conftest import OverlapJudge, assert_relevance_contract
from published_instructions import OUTPUT_RELEVANCE
from test_client import relevance_item

ASYNC_ITEM = relevance_item(async_mode=True, application_name="app", model_name="model")


@pytest.mark.parametrize("flag", ["async_mode", "publish"])
def test_in_process_async_or_published_item_needs_names_as_on_a_server(flag: str) -> None:
    # A server answers 422 here; the in-process client took an unnamed async item as a job.
    item = relevance_item(**{flag: True}, model_name="model")
    with Client() as client, pytest.raises(RequestValidationError) as caught:
        client.inference.detect(body=[item])
    assert caught.value.field == "[0].application_name"
    assert f"required when {flag} is true" in str(caught.value)


def test_in_process_async_items_become_jobs_that_retrieve_and_wait_return(
    overlap_judge: OverlapJudge,
) -> None:
    client = Client(judge="overlap")

    [ack] = client.inference.detect(body=[ASYNC_ITEM])
    job = client.jobs.retrieve(ack.job_id)
    waited = client.jobs.wait(ack.job_id, timeout=5)

    # Nothing was sent: the server's "Data successfully sent to Assay." would say it was.
    assert ack.message.startswith("Scored in this process (no server)") and ack.status == 200
    assert isinstance(job, Job) and job.state == "done" and job.finished
    assert_relevance_contract(job.result.output_relevance)
    assert waited == job
    with pytest.raises(NotFoundError):
        client.jobs.retrieve("no-such-job")


async def test_the_async_client_has_the_same_jobs(overlap_judge: OverlapJudge) -> None:
    async with AsyncClient(judge="overlap") as client:
        [ack] = await client.inference.detect(body=[ASYNC_ITEM])
        job = await client.jobs.wait(ack.job_id, timeout=5)
        retrieved = await client.jobs.retrieve(ack.job_id)

    assert job.state == "done" and retrieved == job
    assert isinstance(job.result, DetectResponseItem)


def test_a_client_keeps_only_its_most_recent_in_process_jobs(
    overlap_judge: OverlapJudge, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(client_module, "IN_PROCESS_JOBS", 3)
    client = Client(judge="overlap")
    acks = [client.inference.detect(body=[ASYNC_ITEM])[0] for _ in range(5)]

    for ack in acks[2:]:
        assert client.jobs.retrieve(ack.job_id).state == "done"
    with pytest.raises(NotFoundError, match="keeps its 3 most recent"):
        client.jobs.retrieve(acks[0].job_id)


def test_a_decorated_function_s_async_jobs_are_reachable(overlap_judge: OverlapJudge) -> None:
    detect = Detect(
        values_returned=["generated_text", "user_query"],
        config={"output_relevance": {}},
        async_mode=True,
        application_name="app",
        model_name="model",
        judge="overlap",
    )

    @detect
    def answer(question: str) -> tuple[str, str]:
        return "Paris is the capital of France.", question

    @detect
    async def answer_later(question: str) -> tuple[str, str]:
        return "Paris is the capital of France.", question

    *_, result = answer("What is the capital of France?")
    *_, later = asyncio.run(answer_later("What is the capital of France?"))

    # Both kinds of function keep their jobs where `jobs` (and `async_jobs`) find them.
    for job_id in (result.detect_response["job_id"], later.detect_response["job_id"]):
        job = detect.jobs.wait(job_id, timeout=5)
        assert job.state == "done"
        assert_relevance_contract(job.result.output_relevance)
        assert asyncio.run(detect.async_jobs.retrieve(job_id)) == job


def test_a_job_whose_detector_fails_is_failed_with_the_reason(failing_judge: str) -> None:
    client = Client(judge=failing_judge)

    [ack] = client.inference.detect(body=[ASYNC_ITEM])
    job = client.jobs.retrieve(ack.job_id)

    assert job.state == "failed" and job.result is None
    assert "timeout" in job.error


def test_results_have_a_short_repr(overlap_judge: OverlapJudge) -> None:
    client = Client(judge="overlap")
    response = client.inference.detect(body=[relevance_item() for _ in range(5)])
    [ack] = client.inference.detect(body=[ASYNC_ITEM])

    score = response[0].output_relevance["score"]
    assert repr(response[0]) == f"DetectResponseItem(output_relevance={score:.4g})"
    assert repr(response).startswith("DetectResponse([DetectResponseItem(output_relevance=")
    assert repr(response).endswith(", … and 2 more])")
    assert len(repr(response).splitlines()) == 1
    job = client.jobs.retrieve(ack.job_id)
    assert repr(job) == (
        f"Job(id={ack.job_id!r}, state='done', "
        f"result=DetectResponseItem(output_relevance={job.result.output_relevance['score']:.4g}))"
    )
    errored = DetectResponseItem({"completeness": {"error": True, "kind": "timeout"}})
    assert repr(errored) == "DetectResponseItem(completeness=error(timeout))"
    # Still the full data underneath.
    assert json.loads(json.dumps(response[0])) == dict(response[0])


def test_the_readme_quotes_what_its_own_example_prints() -> None:
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    example = readme.split("## Python API\n\n```python\n", 1)[1].split("```", 1)[0]
    namespace: dict[str, Any] = {}

    exec(example, namespace)  # the embedded judge, in-process, as a reader would run it

    assert f"Results print short (`{namespace['response'][0]!r}`)" in readme


def test_a_detect_response_becomes_a_data_frame(overlap_judge: OverlapJudge) -> None:
    response = Client(judge="overlap").inference.detect(body=[relevance_item()] * 2)

    frame = response.to_pandas()

    assert isinstance(response, DetectResponse) and len(frame) == 2
    checks = ["core_intent", "prioritize_relevant", "no_tangents", "no_misinterpretation"]
    assert list(frame.columns) == [
        "output_relevance.score",
        "output_relevance.error",
        *(f"output_relevance.{check}" for check in checks),
    ]
    first = response[0].output_relevance
    assert frame["output_relevance.score"].tolist() == [first["score"]] * 2
    probabilities = [e["follow_probability"] for e in first["instructions_list"]]
    assert frame.iloc[0][[f"output_relevance.{c}" for c in checks]].tolist() == probabilities
    assert len(OUTPUT_RELEVANCE) == len(checks)


def test_a_run_summary_gives_its_output_as_a_data_frame(
    overlap_judge: OverlapJudge, tmp_path: Path
) -> None:
    rows = [
        {"id": "a", "user_query": "What is tea?", "generated_text": "Tea is a drink.", "team": 1},
        {"id": "b", "user_query": "Why?", "generated_text": "  "},
    ]
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")

    frame = run_file(data, judge="overlap").to_pandas()

    assert frame["id"].tolist() == ["a", "b"]
    assert frame["generated_text"].tolist()[0] == "Tea is a drink."
    assert frame["team"].tolist()[0] == 1
    assert frame["error"].isna().tolist() == [True, False]
    assert "generated_text" in frame["error"][1]
    assert 0.0 <= frame["output_relevance.score"][0] <= 1.0


def test_to_pandas_without_pandas_says_how_to_install_it(
    overlap_judge: OverlapJudge, monkeypatch: pytest.MonkeyPatch
) -> None:
    response = Client(judge="overlap").inference.detect(body=[relevance_item()])
    monkeypatch.setitem(sys.modules, "pandas", None)  # as if it were not installed

    with pytest.raises(ImportError, match=r"pip install 'assay\[pandas\]'"):
        response.to_pandas()


@pytest.mark.parametrize(
    ("status", "name"),
    [
        (408, "RequestTimeoutError"),
        (409, "ConflictError"),
        (413, "PayloadTooLargeError"),
        (418, "APIError"),
    ],
)
def test_every_status_the_typescript_client_names_has_the_same_error_class(
    status: int, name: str
) -> None:
    import httpx

    import assay
    from assay.transport import status_error

    response = httpx.Response(status, json={"detail": "too much"})
    error = status_error(response)
    assert type(error) is getattr(assay, name)
    assert (error.status_code, error.message) == (status, "too much")

"""The stock AIMon SDK (aimon==0.12.3) against the server, only its base URL changed.

The SDK pins an older anyio than ours, so `make setup-test` installs it into
`.cache/aimon-sdk` (outside the project's venv) and the SDK code runs in a subprocess with that
folder first on its path.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from conftest import assert_relevance_contract

from .conftest import API_KEY, LiveServer

SDK_DIR = Path(__file__).resolve().parents[2] / ".cache" / "aimon-sdk"

# Our own script exercising the SDK's three entry points and one of its error classes.
SDK_SCRIPT = textwrap.dedent(
    """
    import asyncio, json, os
    import aimon
    from aimon import AsyncClient, Client, Detect

    item = {
        "user_query": "What is your return policy?",
        "generated_text": "Our return policy allows returns within 30 days of purchase.",
        "config": {"output_relevance": {"detector_name": "default", "explain": True}},
        "publish": False,
    }
    out = {"sdk_file": aimon.__file__}

    client = Client(auth_header="Bearer " + os.environ["AIMON_API_KEY"])
    response = client.inference.detect(body=[item])
    out["sync"] = response[0].output_relevance

    async def call_async():
        payload = dict(item, publish=True, async_mode=True,
                       application_name="sdk-app", model_name="sdk-model")
        async with AsyncClient(auth_header="Bearer " + os.environ["AIMON_API_KEY"]) as c:
            accepted = await c.inference.detect(body=[payload])
            computed = await c.inference.detect(body=[item])
        return accepted[0].to_dict(), computed[0].output_relevance

    out["async_accepted"], out["async"] = asyncio.run(call_async())

    detect = Detect(
        values_returned=["user_query", "generated_text"],
        config={"output_relevance": {"detector_name": "default", "explain": True}},
        api_key=os.environ["AIMON_API_KEY"],
        publish=True,
        application_name="sdk-app",
        model_name="sdk-model",
    )

    @detect
    def answer(user_query, generated_text):
        return user_query, generated_text

    query, text, result = answer("Explain mitochondria.", "The Eiffel Tower is in Paris.")
    out["decorator"] = {"status": result.status,
                        "output_relevance": result.detect_response.output_relevance}

    bad = Client(auth_header="Bearer not-a-key", max_retries=0)
    try:
        bad.inference.detect(body=[item])
    except aimon.AuthenticationError as error:
        out["auth_error"] = {"class": type(error).__name__, "status": error.status_code,
                             "body": error.body}
    try:
        client.inference.detect(body=[dict(item, config={"nope": {}})])
    except aimon.UnprocessableEntityError as error:
        out["validation_error"] = {"class": type(error).__name__, "body": error.body}
    print(json.dumps(out))
    """
)


def _run_sdk(server_url: str) -> dict[str, Any]:
    assert (SDK_DIR / "aimon").is_dir(), f"AIMon SDK missing at {SDK_DIR}: run `make setup-test`"
    environment = {
        **os.environ,
        "PYTHONPATH": str(SDK_DIR),
        "CLIENT_BASE_URL": server_url,
        "AIMON_API_KEY": API_KEY,
    }
    finished = subprocess.run(
        [sys.executable, "-c", SDK_SCRIPT],
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert finished.returncode == 0, finished.stderr[-3000:]
    result: dict[str, Any] = json.loads(finished.stdout.strip().splitlines()[-1])
    return result


def test_aimon_sdk_client_async_client_and_decorator(live_server: LiveServer) -> None:
    out = _run_sdk(live_server.url)
    assert out["sdk_file"].startswith(str(SDK_DIR))  # the real SDK, not our look-alike
    expected = live_server.post(
        [
            {
                "user_query": "What is your return policy?",
                "generated_text": "Our return policy allows returns within 30 days of purchase.",
                "config": {"output_relevance": {"detector_name": "default", "explain": True}},
            }
        ]
    ).json()[0]["output_relevance"]
    assert out["sync"] == expected
    assert out["async"] == expected
    assert_relevance_contract(out["decorator"]["output_relevance"])
    assert out["decorator"]["status"] == 200

    accepted = out["async_accepted"]
    assert accepted["message"] == "Data successfully sent to Assay."
    assert accepted["status"] == 200
    job = live_server.wait_for_job(accepted["job_id"])
    assert job["state"] == "done" and job["application_name"] == "sdk-app"

    detections = live_server.get("/v1/applications/sdk-app/detections").json()
    assert detections["total"] == 2  # the async job and the decorator's published call
    assert out["auth_error"]["class"] == "AuthenticationError"
    assert out["auth_error"]["status"] == 401
    assert out["auth_error"]["body"]["status"] == 401
    assert out["validation_error"]["class"] == "UnprocessableEntityError"
    assert "[0].config.nope" in out["validation_error"]["body"]["message"]

"""The Python examples of the published Output Relevance page run on Assay unchanged except for
the import line. The page is read from the shared spec folder at test time, never copied here.

`ASSAY_SHARED_DIR` points at the shared folder (default: `<repo>/../shared`).
"""

from __future__ import annotations

import ast
import inspect
import json
import logging
import os
from pathlib import Path
from typing import Any

import pytest

from assay import DetectResponseItem, DetectResult
from conftest import assert_relevance_contract, mean_follow_probability

pytestmark = pytest.mark.usefixtures("no_server_env", "aimon_api_key")

SPEC_FILE = "000_075ea2da24fc593e.txt"
#: The page's example headings, in page order; each example ends at the next heading.
HEADINGS = ("Python (Sync)", "Python (Async)", "Python (Decorator)", "TypeScript")
ON_TOPIC_MITOCHONDRIA = (
    "Mitochondria are the powerhouses of the cell: they produce most of its ATP through "
    "cellular respiration, and they also help regulate cell death and calcium signalling."
)


def shared_dir() -> Path:
    default = Path(__file__).resolve().parents[1].parent / "shared"
    return Path(os.environ.get("ASSAY_SHARED_DIR", default))


def extract_examples(page: str) -> dict[str, str]:
    """Heading -> code of each Python example (the text up to the next heading)."""
    lines = page.splitlines()
    starts: dict[str, int] = {}
    for heading in HEADINGS:
        found = [number for number, line in enumerate(lines) if line.strip() == heading]
        assert len(found) == 1, f"heading {heading!r} appears {len(found)} times on the page"
        starts[heading] = found[0]
    examples = {}
    for heading, next_heading in zip(HEADINGS, HEADINGS[1:], strict=False):
        body = "\n".join(lines[starts[heading] + 1 : starts[next_heading]]).strip()
        assert body, f"no code under {heading!r}"
        examples[heading] = body + "\n"
    return examples


def on_assay(code: str) -> str:
    """The example with its import pointed at Assay: the only change we allow ourselves."""
    assert "from aimon import" in code
    return code.replace("from aimon import", "from assay import")


@pytest.fixture(scope="module")
def examples() -> dict[str, str]:
    path = shared_dir() / "spec" / SPEC_FILE
    if not path.is_file():
        pytest.skip(f"published Output Relevance page not found at {path}; set ASSAY_SHARED_DIR")
    return extract_examples(path.read_text("utf-8"))


@pytest.fixture
def aimon_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIMON_API_KEY", "assay-test-key")


def test_the_page_has_three_python_examples(examples: dict[str, str]) -> None:
    assert set(examples) == set(HEADINGS[:3])
    assert "TypeScript" not in examples["Python (Decorator)"]
    for heading, code in examples.items():
        flags = ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
        tree = compile(on_assay(code), heading, "exec", flags=flags)
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert "assay" in imported and "aimon" not in imported


def test_sync_example(examples: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    namespace: dict[str, Any] = {"__name__": "published_sync_example"}
    exec(compile(on_assay(examples["Python (Sync)"]), "<Python (Sync)>", "exec"), namespace)

    printed = json.loads(capsys.readouterr().out)
    assert_relevance_contract(printed)
    assert printed == namespace["response"][0].output_relevance
    assert isinstance(namespace["response"][0], DetectResponseItem)
    # The return-policy answer is on topic: most instructions should be judged followed.
    assert mean_follow_probability(printed) > 0.5


async def test_async_example(
    examples: dict[str, str],
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    code = compile(
        on_assay(examples["Python (Async)"]),
        "<Python (Async)>",
        "exec",
        flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT,
    )
    namespace: dict[str, Any] = {"__name__": "published_async_example"}
    with caplog.at_level(logging.WARNING, logger="assay.client"):
        pending = eval(code, namespace)
        assert inspect.iscoroutine(pending)
        await pending

    output = capsys.readouterr().out
    printed, end = json.JSONDecoder().raw_decode(output)
    assert isinstance(printed, list) and len(printed) == 1
    # The example asks for async mode: in-process it is answered as a server answers, with the
    # acknowledgement and the job's id (`jobs.retrieve` gives the result).
    assert set(printed[0]) == {"message", "status", "job_id"}
    assert printed[0]["status"] == 200 and printed[0]["job_id"]
    assert output[end:].strip().startswith("View results at")
    # The example asks to publish; in-process there is no store, and we say so.
    assert any("base_url" in record.getMessage() for record in caplog.records)


def test_decorator_example(examples: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    namespace: dict[str, Any] = {"__name__": "published_decorator_example"}
    exec(
        compile(on_assay(examples["Python (Decorator)"]), "<Python (Decorator)>", "exec"), namespace
    )

    assert capsys.readouterr().out.startswith("DetectResult(status=200")
    result = namespace["aimon_result"]
    assert isinstance(result, DetectResult)
    assert result.status == 200
    off_topic = result.detect_response.output_relevance
    assert isinstance(off_topic["score"], float)
    assert_relevance_contract(off_topic)
    # An answer about the Eiffel Tower follows none of the relevance instructions.
    assert off_topic["score"] == 0.0
    assert all(entry["explanation"] for entry in off_topic["instructions_list"])

    # The page's answer is about the Eiffel Tower; a real answer must look more relevant.
    query, text, on_topic_result = namespace["output_relevance_test"](
        "Explain the role of mitochondria in cells.", ON_TOPIC_MITOCHONDRIA
    )
    assert text == ON_TOPIC_MITOCHONDRIA
    on_topic = on_topic_result.detect_response.output_relevance
    assert_relevance_contract(on_topic)
    assert mean_follow_probability(on_topic) > mean_follow_probability(off_topic)

"""The LLM judge pointed at the loopback stub: shared by the fault, row and reading tests."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from assay.detectors.evaluate import detect_items, parse_items
from assay.judges import register_judge
from assay.judges.openai.judge import OpenAIJudge
from assay.judges.openai.settings import LLMSettings
from conftest import StubServer

QUERY = "How long should I boil eggs for a soft yolk?"
ANSWER = "Boil the eggs for 6 minutes for a soft, runny yolk."
PROBABILITIES = [0.9, 0.2, 0.65, 0.4]


def item(
    explain: bool = False, must_compute: str = "ignore_failures", text: str = ANSWER
) -> dict[str, Any]:
    return {
        "user_query": QUERY,
        "generated_text": text,
        "config": {"output_relevance": {"judge": "openai", "explain": explain}},
        "must_compute": must_compute,
    }


def use_judge(stub: StubServer, tmp_path: Path | None = None, **overrides: Any) -> OpenAIJudge:
    """Register an OpenAIJudge pointed at the stub as judge "openai"."""
    options: dict[str, Any] = {
        "base_url": stub.url + "/v1",
        "model": "stub-model",
        "cache": tmp_path is not None,
        "cache_path": (tmp_path / "calls.sqlite3") if tmp_path else None,
        "backoff_base": 0.01,
        "backoff_cap": 0.05,
        "structured": "json_schema",
    }
    judge = OpenAIJudge(LLMSettings(**{**options, **overrides}))
    register_judge("openai", lambda: judge)
    return judge


@pytest.fixture(autouse=True)
def restore_openai_judge() -> Iterator[None]:
    """Put the default "openai" judge back after a test registered its own."""
    yield
    from assay.judges import _openai

    register_judge("openai", _openai)


async def relevance(explain: bool = False, text: str = ANSWER) -> dict[str, Any]:
    """output_relevance of one item, judged by the registered "openai" judge."""
    [result] = await detect_items(parse_items([item(explain, text=text)]))
    return dict(result["output_relevance"])


def write_rows(tmp_path: Path, texts: Sequence[str]) -> Path:
    """A JSONL file of rows asking QUERY, one per response text."""
    path = tmp_path / "rows.jsonl"
    path.write_text(
        "".join(json.dumps({"user_query": QUERY, "generated_text": t}) + "\n" for t in texts)
    )
    return path


def probabilities(result: dict[str, Any]) -> list[float]:
    return [entry["follow_probability"] for entry in result["instructions_list"]]

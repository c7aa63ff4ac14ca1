"""The LLM judge end to end against a real OpenAI-compatible server on loopback (llama-cpp-python
serving SmolLM2-135M-Instruct). SmolLM2's judgements are near chance, so these tests prove the
mechanics: probabilities read from the server's logprobs, the detector contract, the cache, the
cascade and the CLI's dry run. A counting proxy in front of the server counts requests."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from assay.detectors import DETECTORS
from assay.detectors.evaluate import detect_items, parse_items, questions_for
from assay.judges import Verdict, get_judge, register_judge
from assay.judges.cascade import CascadeJudge
from assay.judges.openai.judge import OpenAIJudge
from assay.judges.openai.settings import LLMSettings
from assay.runner import run_file
from conftest import assert_relevance_contract
from llm.server import CountingProxy, counting_proxy, llama_server

ROWS = [
    {
        "id": "eggs",
        "user_query": "How long should I boil eggs for a soft yolk?",
        "context": ["Cook eggs in boiling water for 6 minutes for a runny yolk."],
        "generated_text": "Boil the eggs for 6 minutes for a soft, runny yolk.",
    },
    {
        "id": "vpn",
        "user_query": "How do I connect to the office VPN?",
        "context": ["Install the SecureLink client and sign in with your work email."],
        "generated_text": "Our cafeteria serves lunch from noon. Also, install SecureLink.",
    },
]


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log = tmp_path_factory.mktemp("llama") / "server.log"
    with llama_server(log) as url:
        yield url


@pytest.fixture
def proxy(server_url: str) -> Iterator[CountingProxy]:
    with counting_proxy(server_url) as counting:
        yield counting


@pytest.fixture(autouse=True)
def restore_judges() -> Iterator[None]:
    yield
    from assay.judges import _cascade, _openai

    register_judge("openai", _openai)
    register_judge("cascade", _cascade)


def use_judge(proxy: CountingProxy, tmp_path: Path, **overrides: Any) -> OpenAIJudge:
    settings = LLMSettings(
        **{
            "base_url": proxy.url,
            "model": "smollm2",
            "cache_path": tmp_path / "calls.sqlite3",
            # A CPU server on a shared machine can be slow; these tests are not about timeouts.
            "call_timeout": 600,
            "row_timeout": 1200,
            **overrides,
        }
    )
    judge = OpenAIJudge(settings)
    register_judge("openai", lambda: judge)
    return judge


def p_yes(top_logprobs: list[dict[str, Any]]) -> float:
    """P(yes) over yes/no spellings, computed here from the raw JSON independently of Assay."""
    mass = {"yes": 0.0, "no": 0.0}
    for entry in top_logprobs:
        word = entry["token"].strip(' "').lower()
        word = {"true": "yes", "false": "no"}.get(word, word)
        if word in mass:
            mass[word] += math.exp(entry["logprob"])
    return mass["yes"] / (mass["yes"] + mass["no"])


def relevance_questions(explain: bool = False) -> list[Any]:
    raw = {**ROWS[0], "config": {"output_relevance": {"explain": explain}}}
    raw.pop("id")
    return questions_for(parse_items([raw])[0], DETECTORS["output_relevance"])


async def test_per_instruction_probability_is_p_yes_from_the_servers_logprobs(
    proxy: CountingProxy, server_url: str, tmp_path: Path
) -> None:
    judge = use_judge(proxy, tmp_path, strategy="per_instruction")
    question = relevance_questions()[0]
    [verdict] = await judge.answer([question])
    assert isinstance(verdict, Verdict) and verdict.evidence["method"] == "logprobs"
    [request] = proxy.bodies
    assert request["max_tokens"] == 1 and request["logprobs"] is True
    raw = httpx.post(f"{server_url}/chat/completions", json=request, timeout=120).json()
    top = raw["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
    assert verdict.follow_probability == pytest.approx(p_yes(top), abs=1e-3)
    assert 0.0 < verdict.follow_probability < 1.0


async def test_one_call_per_rubric_reads_each_answer_tokens_logprobs(
    proxy: CountingProxy, server_url: str, tmp_path: Path
) -> None:
    judge = use_judge(proxy, tmp_path, strategy="fields", structured="auto")
    verdicts = await judge.answer(relevance_questions())
    assert all(isinstance(v, Verdict) for v in verdicts)
    # llama-cpp-python refuses OpenAI's json_schema form; its own json_object form is kept.
    forms = [body.get("response_format", {}).get("type") for body in proxy.bodies]
    assert forms == ["json_schema", "json_object"]
    raw = httpx.post(f"{server_url}/chat/completions", json=proxy.bodies[-1], timeout=120).json()
    answers = [
        entry
        for entry in raw["choices"][0]["logprobs"]["content"]
        if entry["token"].strip(' "').lower() in ("yes", "no")
    ]
    expected = [p_yes(entry["top_logprobs"]) for entry in answers[:4]]
    got = [v.follow_probability for v in verdicts]  # type: ignore[union-attr]
    assert got == pytest.approx(expected, abs=1e-3)


async def test_results_have_the_detector_contract(proxy: CountingProxy, tmp_path: Path) -> None:
    use_judge(proxy, tmp_path)
    items = [
        {
            **{k: v for k, v in row.items() if k != "id"},
            "config": {
                "output_relevance": {"judge": "openai", "explain": True},
                "completeness": {"judge": "openai"},
            },
        }
        for row in ROWS
    ]
    results = await detect_items(parse_items(items))
    for result in results:
        assert_relevance_contract(result["output_relevance"])
        assert all(e["explanation"] for e in result["output_relevance"]["instructions_list"])
        completeness = result["completeness"]
        expected = [i.text for i in DETECTORS["completeness"].instructions]
        assert [e["instruction"] for e in completeness["instructions_list"]] == expected
        labels = [e["label"] for e in completeness["instructions_list"]]
        assert completeness["score"] == pytest.approx(sum(labels) / len(labels))
        assert all(e["explanation"] == "" for e in completeness["instructions_list"])


def write_rows(tmp_path: Path) -> Path:
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    return path


def test_the_cache_suppresses_repeat_calls(proxy: CountingProxy, tmp_path: Path) -> None:
    use_judge(proxy, tmp_path, structured="json_object")
    rows = write_rows(tmp_path)
    first = run_file(rows, detectors=["output_relevance"], judge="openai")
    assert proxy.calls == 2 == first.usage.calls  # one call per row's rubric
    assert first.usage.prompt_tokens > 0 and first.usage.completion_tokens > 0
    use_judge(proxy, tmp_path, structured="json_object")  # a fresh judge, as in a new process
    second = run_file(rows, detectors=["output_relevance"], judge="openai")
    assert proxy.calls == 2
    assert second.usage.calls == 0 and second.usage.cached_calls == 2
    first_lines = Path(first.output_path or "").read_text()
    assert Path(second.output_path or "").read_text() == first_lines


async def test_the_cascade_asks_the_llm_only_inside_the_band(
    proxy: CountingProxy, tmp_path: Path
) -> None:
    llm = use_judge(proxy, tmp_path, strategy="per_instruction")
    questions = relevance_questions()
    embedded = get_judge("embedded")
    first = await embedded.answer(questions)
    probabilities = sorted(a.follow_probability for a in first if isinstance(a, Verdict))
    # A band holding the two middle probabilities: those two, and only those, go to the LLM.
    band = (probabilities[1], probabilities[2])
    cascade = CascadeJudge(embedded, llm, band)
    answers = await cascade.answer(questions)
    uncertain = [i for i, a in enumerate(first) if cascade.uncertain(a)]
    assert 2 <= len(uncertain) < len(questions)
    assert proxy.calls == len(uncertain)
    asked = {body["messages"][-1]["content"].split("Instruction: ")[1] for body in proxy.bodies}
    assert asked == {
        f"{questions[i].instruction}\n\nDoes the response follow this instruction? Answer with one word, yes or no."
        for i in uncertain
    }
    for index, (before, after) in enumerate(zip(first, answers, strict=True)):
        assert isinstance(before, Verdict) and isinstance(after, Verdict)
        if index in uncertain:
            assert after.evidence["method"] == "logprobs"
            assert after.evidence["escalated_from"] == round(before.follow_probability, 4)
        else:
            assert after == before


def test_cli_dry_run_makes_no_call_and_the_run_reports_usage(
    proxy: CountingProxy, tmp_path: Path
) -> None:
    rows = write_rows(tmp_path)
    env = {**os.environ, "ASSAY_LLM_CACHE_PATH": str(tmp_path / "cli-cache.sqlite3")}
    env.pop("ASSAY_JUDGE", None)
    command = [
        sys.executable,
        "-m",
        "assay.cli",
        "run",
        str(rows),
        "--detector",
        "output_relevance",
        "--judge",
        "openai",
        "--llm",
        f"base_url={proxy.url}",
        "--llm",
        "model=smollm2",
        "--llm",
        "structured=json_object",
        "--llm",
        "call_timeout=600",
    ]
    dry = subprocess.run(
        [*command, "--dry-run"], capture_output=True, text=True, env=env, timeout=300
    )
    assert dry.returncode == 0, dry.stderr
    assert proxy.calls == 0
    assert "calls to make" in dry.stdout and "│ 2" in dry.stdout.replace("  ", "")
    real = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    assert real.returncode == 0, real.stderr
    assert proxy.calls == 2
    assert "LLM: 2 calls over 2 of 2 rows" in real.stdout
    summary = json.loads((tmp_path / "rows.scored.jsonl.summary.json").read_text())
    assert summary["llm"]["calls"] == 2 and summary["llm"]["calls_per_row"] == 1.0

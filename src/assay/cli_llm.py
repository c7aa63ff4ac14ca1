"""The `assay` command's LLM-judge options and `--dry-run` (kept out of cli.py to keep it small).

`apply_llm_options` turns the flags into judge settings before anything is scored;
`plan_rows` / `plan_items` count the LLM calls and estimate the tokens a run would spend without
calling the endpoint, and `print_plan` shows them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from assay._sync import run_sync
from assay.detectors import DETECTORS
from assay.detectors.evaluate import default_judge_name, parse_item, questions_for
from assay.judges import Question, get_judge
from assay.judges.cascade import CascadeJudge, parse_band
from assay.judges.openai.estimate import CostEstimate, estimate_cost
from assay.judges.openai.judge import OpenAIJudge
from assay.judges.usage import Usage
from assay.runner.io import read_rows
from assay.runner.local import build_request
from assay.schema import DetectRequestItem, RequestValidationError

#: Judges that call an LLM (and so have something to estimate).
LLM_JUDGES = ("openai", "cascade")

NoCache = Annotated[
    bool, typer.Option("--no-cache", help="LLM judge: neither read nor write the call cache.")
]
DryRun = Annotated[
    bool,
    typer.Option(
        "--dry-run", help="Print the LLM calls and estimated tokens, then stop (no call made)."
    ),
]
LLMBaseURL = Annotated[
    str | None,
    typer.Option("--llm-base-url", help="OpenAI-compatible API root (or $ASSAY_LLM_BASE_URL)."),
]
LLMModel = Annotated[
    str | None, typer.Option("--llm-model", help="Model name for the LLM judge ($ASSAY_LLM_MODEL).")
]
LLMStrategy = Annotated[
    str | None,
    typer.Option(
        "--llm-strategy",
        help="fields (one call per rubric) or per_instruction ($ASSAY_LLM_STRATEGY).",
    ),
]
LLMVotes = Annotated[
    int | None,
    typer.Option(
        "--llm-votes", help="Sampled votes when the endpoint has no logprobs (default 5)."
    ),
]
CascadeBand = Annotated[
    str | None,
    typer.Option(
        "--cascade-band", help="low,high: embedded probabilities sent to the LLM (0.3,0.7)."
    ),
]

#: How these options are named in error messages (merged into the commands' own maps).
OPTION_LABELS = {
    "base_url": "--llm-base-url",
    "model": "--llm-model",
    "strategy": "--llm-strategy",
    "votes": "--llm-votes",
    "band": "--cascade-band",
}


def apply_llm_options(
    no_cache: bool,
    base_url: str | None,
    model: str | None,
    strategy: str | None,
    votes: int | None,
    band: str | None,
) -> None:
    """Rebuild the "openai" and "cascade" judges with the flags over the environment.

    Raises RequestValidationError naming the option when a value is unusable.
    """
    from assay.judges.openai import configure

    chosen_band = parse_band(band) if band else None
    overrides: dict[str, Any] = {
        "base_url": base_url,
        "model": model,
        "strategy": strategy,
        "votes": votes,
        "cache": False if no_cache else None,
    }
    configure(band=chosen_band, **overrides)


def plan_items(items: Iterable[DetectRequestItem], judge: str | None) -> tuple[CostEstimate, int]:
    """The LLM cost of scoring `items`: (estimate, rows that would call the LLM).

    judge: the run's default judge; a detector's own `config.judge` wins, as in a real run.
    For the cascade, the embedded judge runs (offline) to find the instructions it would send up.
    """
    fallback = judge or default_judge_name()
    by_backend: dict[str, list[Question]] = {name: [] for name in LLM_JUDGES}
    for item in items:
        for name, config in item.config.items():
            backend = config.judge or fallback
            if backend in by_backend:
                by_backend[backend].extend(questions_for(item, DETECTORS[name]))
    llm = get_judge("openai")
    assert isinstance(llm, OpenAIJudge)
    questions = list(by_backend["openai"])
    if by_backend["cascade"]:
        cascade = get_judge("cascade")
        assert isinstance(cascade, CascadeJudge)
        first = run_sync(cascade.first.answer(by_backend["cascade"]))
        questions += [
            q for q, a in zip(by_backend["cascade"], first, strict=True) if cascade.uncertain(a)
        ]
    rows = {(q.generated_text, q.user_query, q.context) for q in questions}
    return estimate_cost(llm.settings, questions, llm.cache), len(rows)


def plan_rows(
    path: Path, detectors: Sequence[str] | None, explain: bool, judge: str | None
) -> tuple[CostEstimate, int]:
    """`plan_items` over a dataset file's valid rows (invalid rows would make no call)."""
    items = []
    for row, fields in read_rows(path):
        if isinstance(fields, Exception):
            continue
        try:
            items.append(parse_item(build_request(fields, detectors, explain), row))
        except RequestValidationError:
            continue
    return plan_items(items, judge)


def print_plan(estimate: CostEstimate, rows: int) -> None:
    """Show a dry run's numbers on stdout."""
    llm = get_judge("openai")
    assert isinstance(llm, OpenAIJudge)
    settings = llm.settings
    table = Table(title="dry run: nothing was sent to the LLM endpoint")
    table.add_column("")
    table.add_column("value", justify="right")
    table.add_row("endpoint", settings.base_url or "(OpenAI default)")
    table.add_row("model / strategy", f"{settings.model} / {settings.strategy}")
    table.add_row("rows calling the LLM", str(rows))
    table.add_row("instructions for the LLM", str(estimate.questions))
    table.add_row("calls to make", str(estimate.calls))
    table.add_row("calls answered by the cache", str(estimate.cached_calls))
    table.add_row("prompt tokens (estimate)", f"~{estimate.prompt_tokens}")
    table.add_row("completion tokens (estimate)", f"~{estimate.completion_tokens}")
    console = Console(highlight=False)
    console.print(table)
    console.print(
        f"If the endpoint returns no logprobs, each call becomes {settings.votes} sampled calls.",
        soft_wrap=True,
    )


def print_usage(usage: Usage, rows_with_calls: int, rows: int) -> None:
    """One line with a run's LLM accounting (nothing when no LLM was involved)."""
    if usage.is_empty():
        return
    parts = [
        f"LLM: {usage.calls} calls over {rows_with_calls} of {rows} rows",
        f"{usage.prompt_tokens} prompt + {usage.completion_tokens} completion tokens",
        f"{usage.cached_calls} answered by the cache",
    ]
    if usage.escalated:
        parts.append(f"{usage.escalated} instructions escalated by the cascade")
    if usage.voted:
        parts.append(f"{usage.voted} instructions answered by sampled votes (no logprobs)")
    Console(highlight=False).print("; ".join(parts), soft_wrap=True)

"""The `assay` command's LLM-judge options and `--dry-run` (kept out of cli.py to keep it small).

`apply_llm_options` turns the flags into judge settings before anything is scored;
`plan_rows` / `plan_items` count the LLM calls and estimate the tokens a run would spend without
calling the endpoint, and `print_plan` shows them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from assay._sync import run_sync
from assay.detectors import DETECTORS
from assay.detectors.evaluate import default_judge_name, questions_for
from assay.judges import Question, get_judge
from assay.judges.cascade import CascadeJudge, parse_band
from assay.judges.openai.estimate import CostEstimate, estimate_cost
from assay.judges.openai.judge import OpenAIJudge
from assay.judges.openai.settings import parse_overrides
from assay.judges.usage import Usage
from assay.runner.io import read_rows
from assay.runner.rows import DetectorScorer
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
LLMOptions = Annotated[
    list[str] | None,
    typer.Option(
        "--llm",
        help="LLM judge setting as name=value (repeatable), e.g. base_url=http://127.0.0.1:8080/v1,"
        " model=..., strategy=fields|per_instruction, votes=5, call_timeout=60 (see README).",
    ),
]
CascadeBand = Annotated[
    str | None,
    typer.Option(
        "--cascade-band", help="low,high: embedded probabilities sent to the LLM (0.3,0.7)."
    ),
]

#: How these options are named in error messages (merged into the commands' own maps).
OPTION_LABELS = {"llm": "--llm", "band": "--cascade-band"}


def apply_llm_options(no_cache: bool, settings: Sequence[str] | None, band: str | None) -> None:
    """Rebuild the "openai" and "cascade" judges with the flags over the environment.

    no_cache: turn the judge-call cache off.
    settings: `--llm name=value` strings.
    band: `--cascade-band` text.
    Raises RequestValidationError naming the option when a value is unusable.
    """
    from assay.judges.openai import configure

    if not (no_cache or settings or band):
        return  # the judges read the environment themselves, when (and if) one is built
    chosen_band = parse_band(band, "band") if band else None
    overrides = parse_overrides(settings or [])
    if no_cache:
        overrides["cache"] = False
    try:
        configure(band=chosen_band, **overrides)
    except RequestValidationError as error:
        raise RequestValidationError(f"llm.{error.field}", error.message) from None


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


def plan_rows(path: Path, scorer: DetectorScorer) -> tuple[CostEstimate, int]:
    """`plan_items` over a dataset file's valid rows, prepared as `scorer` would (invalid rows
    would make no call)."""
    prepared = (scorer.prepare(row) for row in read_rows(path))
    return plan_items((p.item for p in prepared if p.item is not None), scorer.judge)


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

"""Options several `assay` commands take, declared and explained once, and how the LLM judge's
flags (`--llm`, `--no-cache`, `--cascade-band`) become its settings before anything is scored."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer

from assay.schema import RequestValidationError

Explain = Annotated[bool, typer.Option("--explain", help="Include explanations.")]
JudgeName = Annotated[
    str | None,
    typer.Option("--judge", help="Judge backend: embedded (default), openai or cascade."),
]
FailUnder = Annotated[
    list[str] | None,
    typer.Option(
        "--fail-under",
        help="NAME=THRESHOLD: exit 1 when NAME's mean score is below it (repeatable).",
    ),
]
Junit = Annotated[
    Path | None, typer.Option("--junit", help="Also write JUnit XML, one test case per row.")
]
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

#: How the LLM options are named in error messages (merged into the commands' own maps).
LLM_OPTION_LABELS = {"llm": "--llm", "band": "--cascade-band"}


def apply_llm_options(no_cache: bool, settings: Sequence[str] | None, band: str | None) -> None:
    """Rebuild the "openai" and "cascade" judges with the flags over the environment.

    no_cache: turn the judge-call cache off.
    settings: `--llm name=value` strings.
    band: `--cascade-band` text.
    Raises RequestValidationError naming the option when a value is unusable.
    """
    if not (no_cache or settings or band):
        return  # the judges read the environment themselves, when (and if) one is built
    from assay.judges.cascade import parse_band
    from assay.judges.openai import configure
    from assay.judges.openai.settings import parse_overrides

    chosen_band = parse_band(band, "band") if band else None
    overrides = parse_overrides(settings or [])
    if no_cache:
        overrides["cache"] = False
    try:
        configure(band=chosen_band, **overrides)
    except RequestValidationError as error:
        raise RequestValidationError(f"llm.{error.field}", error.message) from None

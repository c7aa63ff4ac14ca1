"""Options several `assay` commands take, declared and explained once, and how the LLM judge's
flags (`--llm`, `--no-cache`, `--cascade-band`) become its settings before anything is scored."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated

import typer

from assay.schema import RequestValidationError


def number_option(
    what: str, low: float = -math.inf, high: float = math.inf
) -> Callable[[float | None], float | None]:
    """An option callback that takes a finite number from `low` to `high`, and otherwise says
    it "must be {what}". Click's own range check lets NaN through (it compares false)."""

    def check(value: float | None) -> float | None:
        if value is not None and not (math.isfinite(value) and low <= value <= high):
            raise typer.BadParameter(f"must be {what}, got {value}")
        return value

    return check


#: A 0-1 figure (a rate, a score).
rate = number_option("a number from 0 to 1", 0.0, 1.0)


Explain = Annotated[
    bool,
    typer.Option(
        "--explain/--no-explain",
        help="Ask every detector for an explanation of each verdict (sets `explain` in its "
        "config either way).",
    ),
]
JudgeName = Annotated[
    str | None,
    typer.Option(
        "--judge", metavar="NAME", help="Judge backend: embedded (default), openai or cascade."
    ),
]
FailUnder = Annotated[
    list[str] | None,
    typer.Option(
        "--fail-under",
        metavar="SCORER=THRESHOLD",
        help="Exit 1 when the scorer's mean score is below the threshold; rows it could not "
        "score count as failures (repeatable).",
    ),
]
Junit = Annotated[
    Path | None,
    typer.Option(
        "--junit",
        metavar="FILE",
        help="Also write JUnit XML: a test case per row and per gate; failures and errors "
        "match the exit code.",
    ),
]
AllowErrors = Annotated[
    bool,
    typer.Option(
        "--allow-errors/--no-allow-errors",
        help="Exit 0 (not 3) when rows errored; their JUnit cases are skipped, not errors.",
    ),
]
JsonOutput = Annotated[
    bool, typer.Option("--json/--no-json", help="Print JSON on stdout instead of tables.")
]
UseCache = Annotated[
    bool | None,
    typer.Option(
        "--cache/--no-cache",
        help="LLM judge: read and write the call cache; off, it does neither (default: "
        "$ASSAY_LLM_CACHE, else on).",
        show_default=False,
    ),
]
DryRun = Annotated[
    bool,
    typer.Option(
        "--dry-run/--no-dry-run",
        help="Print the LLM calls and estimated tokens, then stop (no call made).",
    ),
]
LLMOptions = Annotated[
    list[str] | None,
    typer.Option(
        "--llm",
        metavar="NAME=VALUE",
        help="LLM judge setting (repeatable), e.g. base_url=http://127.0.0.1:8080/v1, "
        "model=..., strategy=fields|per_instruction, votes=5, call_timeout=60 (see README).",
    ),
]
CascadeBand = Annotated[
    str | None,
    typer.Option(
        "--cascade-band",
        metavar="LOW,HIGH",
        help="Embedded probabilities sent on to the LLM (default 0.3,0.7).",
    ),
]


def check_llm_judge(name: str | None) -> None:
    """Build the LLM judge now when the run will use it (`--judge` or `$ASSAY_JUDGE`), so a bad
    `$ASSAY_LLM_*` or `$ASSAY_CASCADE_BAND` value stops the command before any row, naming the
    variable, instead of failing every row. Building one calls nothing."""
    from assay.environment import default_judge_name
    from assay.judges import get_judge

    chosen = name or default_judge_name()
    if chosen in ("openai", "cascade"):
        get_judge(chosen)


def check_llm_environment() -> None:
    """Read every `$ASSAY_LLM_*` and `$ASSAY_CASCADE_BAND` that is set, so that a bad value
    stops a server at start, naming the variable (it started, then answered 500 to every
    request for the LLM judge). Unset variables are not required: a server may judge with the
    embedded judge alone."""
    from assay.judges.cascade import BAND_ENV, band_from_env
    from assay.judges.openai.settings import settings_from_env

    if any(name.startswith("ASSAY_LLM_") and value.strip() for name, value in os.environ.items()):
        settings_from_env()
    if os.environ.get(BAND_ENV, "").strip():
        band_from_env()


#: How the LLM options are named in error messages (merged into the commands' own maps).
LLM_OPTION_LABELS = {"llm": "--llm", "band": "--cascade-band", "cache": "--cache/--no-cache"}


def check_llm_options_apply(
    judge: str | None, cache: bool | None, settings: Sequence[str] | None, band: str | None
) -> None:
    """Refuse LLM-judge flags on a detector run that judges with another judge (`--judge`, else
    `$ASSAY_JUDGE`): they would be ignored in silence, and a user who forgot `--judge openai`
    would take the embedded judge's verdicts for the LLM's."""
    from assay.environment import default_judge_name

    chosen = judge or default_judge_name()
    if band and chosen != "cascade":
        raise RequestValidationError(
            "band", f"applies with --judge cascade only (this run judges with {chosen!r})"
        )
    if chosen in ("openai", "cascade"):
        return
    if settings:
        field = "llm"
    elif cache is not None:
        field = "cache"
    else:
        return
    raise RequestValidationError(
        field,
        f"applies with --judge openai or cascade only (this run judges with {chosen!r}); "
        "add --judge openai, or leave the LLM options out",
    )


def apply_llm_options(cache: bool | None, settings: Sequence[str] | None, band: str | None) -> None:
    """Rebuild the "openai" and "cascade" judges with the flags over the environment.

    cache: `--cache` (True) or `--no-cache` (False) over `$ASSAY_LLM_CACHE`; None: not given.
    settings: `--llm name=value` strings.
    band: `--cascade-band` text.
    Raises RequestValidationError naming the option when a value is unusable.
    """
    if cache is None and not (settings or band):
        return  # the judges read the environment themselves, when (and if) one is built
    from assay.judges.cascade import band_from_env, parse_band
    from assay.judges.openai import configure
    from assay.judges.openai.settings import parse_overrides, settings_from_env

    chosen_band = parse_band(band, "band") if band else None
    overrides = parse_overrides(settings or [])
    if cache is not None:
        overrides["cache"] = cache
    # The environment's own mistakes are named by their variable, not blamed on a flag (a
    # variable the flags override is not read).
    settings_from_env(overridden=overrides)
    if chosen_band is None:
        band_from_env()
    try:
        configure(band=chosen_band, **overrides)
    except RequestValidationError as error:
        raise RequestValidationError(f"llm.{error.field}", error.message) from None

"""What every `assay` command shares on the terminal: exit codes, one-line errors, progress
bars, the LLM dry-run and usage tables, warnings.

Every error ends in one red line on stderr naming the field (as its command-line option) and what
was wrong, never a traceback. Exit codes: 0 ran, 1 scoring failed (e.g. the judge could not
load, a gate failed), 2 bad input.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from assay.schema import DetectorFailed, RequestValidationError

if TYPE_CHECKING:
    from assay.judges.openai.estimate import CostEstimate
    from assay.judges.openai.settings import LLMSettings
    from assay.judges.usage import Usage

EXIT_FAILED = 1
EXIT_BAD_INPUT = 2


def option_label(field: str, options: Mapping[str, str]) -> str:
    """`generated_text` -> `--response (generated_text)`; unknown names stay as they are."""
    labels = []
    for part in field.split(", "):
        base = re.split(r"[.\[]", part, maxsplit=1)[0]
        option = options.get(base)
        if option is None or option == "--" + part.replace("_", "-"):
            labels.append(option or part)
        else:
            labels.append(f"{option} ({part})")
    return ", ".join(labels)


def fail(message: str, code: int) -> typer.Exit:
    one_line = " ".join(message.split())
    Console(stderr=True, soft_wrap=True).print(Text(f"error: {one_line}", style="bold red"))
    return typer.Exit(code)


@contextmanager
def reported_errors(
    options: Mapping[str, str], bad_input: tuple[type[Exception], ...] = ()
) -> Iterator[None]:
    """Turn any error into one red line and an exit code.

    options: field name -> the command-line option that sets it, for naming fields.
    bad_input: further exception types that mean unusable input (exit 2, their message only).
    """
    try:
        yield
    except typer.Exit:
        raise
    except RequestValidationError as error:
        raise fail(
            f"{option_label(error.field, options)}: {error.message}", EXIT_BAD_INPUT
        ) from None
    except bad_input as error:
        message = error.args[0] if error.args else str(error)
        raise fail(str(message), EXIT_BAD_INPUT) from None
    except DetectorFailed as error:
        raise fail(str(error), EXIT_FAILED) from None
    except Exception as error:  # anything else still gets one line, not a traceback
        raise fail(f"{type(error).__name__}: {error}", EXIT_FAILED) from None


class RateColumn(ProgressColumn):
    """Rows per second so far."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text(f"{speed:.1f} rows/s" if speed else "– rows/s", style="progress.data.speed")


@contextmanager
def progress_bar(label: str) -> Iterator[tuple[Progress, TaskID]]:
    """A stderr progress bar with rows/s and ETA; set its total once known."""
    progress = Progress(
        TextColumn(label),
        BarColumn(),
        MofNCompleteColumn(),
        RateColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
    )
    with progress:
        yield progress, progress.add_task(label, total=None)


def warn(message: str) -> None:
    """One yellow warning line on stderr."""
    Console(stderr=True, soft_wrap=True, highlight=False).print(
        Text(f"warning: {' '.join(message.split())}", style="yellow")
    )


def print_plan(settings: LLMSettings, estimate: CostEstimate, rows: int) -> None:
    """Show a dry run's numbers on stdout.

    settings: the LLM judge's settings (endpoint, model, strategy, votes).
    estimate: calls and tokens the run would spend.
    rows: rows that would call the LLM.
    """
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

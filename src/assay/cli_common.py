"""What every `assay` command shares: exit codes, one-line errors, progress bars.

Every error ends in one red line on stderr naming the field (as its command-line option) and what
was wrong, never a traceback. Exit codes: 0 ran, 1 scoring failed (e.g. the judge could not
load, a gate failed), 2 bad input.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

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
from rich.text import Text

from assay.schema import DetectorFailed, RequestValidationError

EXIT_FAILED = 1
EXIT_BAD_INPUT = 2

# Options several commands take, spelled and explained once.
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
def reported_errors(options: Mapping[str, str]) -> Iterator[None]:
    """Turn any error into one red line and an exit code."""
    try:
        yield
    except typer.Exit:
        raise
    except RequestValidationError as error:
        raise fail(
            f"{option_label(error.field, options)}: {error.message}", EXIT_BAD_INPUT
        ) from None
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

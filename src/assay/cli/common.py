"""What every `assay` command shares on the terminal: exit codes, one-line errors, progress
(a bar on a terminal, a line every few seconds in a log), the LLM dry-run and usage tables,
warnings and notes.

Every error ends in one red line on stderr naming the field (as its command-line option) and what
was wrong, never a traceback or an exception's class name; usage errors (an unknown option, a
missing argument) too. Exit codes: 0 ran, 1 a gate failed or the command could not finish (e.g.
`assay detect`'s judge or `assay run`'s publishing failed; a row that fails is 3), 2 unusable
input, 3 some rows errored (unless `--allow-errors`).
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, Protocol

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

# Typer vendors its own Click; its exceptions are the ones its parser raises (version pinned).
from typer._click import exceptions as click_errors
from typer.core import TyperGroup

from assay.schema import DetectorFailed, RequestValidationError

if TYPE_CHECKING:
    from assay.judges.openai.estimate import CostEstimate
    from assay.judges.openai.settings import LLMSettings
    from assay.judges.usage import Usage

EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_ROWS_ERRORED = 3
#: Ctrl-C or SIGTERM, as shells report a SIGINT death (128 + 2).
EXIT_INTERRUPTED = 130
#: Seconds between progress lines when stderr is not a terminal (CI logs); tests set it to 0.
PROGRESS_SECONDS_ENV = "ASSAY_PROGRESS_SECONDS"
DEFAULT_PROGRESS_SECONDS = 5.0


class OneLineErrorsGroup(TyperGroup):
    """The root command: usage errors (unknown option, missing argument, bad value) end in one
    line naming the problem and where help is, like every other error, instead of Click's
    three-line usage block. Commands are listed in the order a user meets them."""

    #: `assay --help` lists commands in this order (any others after them).
    command_order = ("detectors", "detect", "run", "report", "serve", "metrics", "ood")

    def list_commands(self, ctx: Any) -> list[str]:
        names = super().list_commands(ctx)
        rank = {name: number for number, name in enumerate(self.command_order)}
        return sorted(names, key=lambda name: rank.get(name, len(rank)))

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not isinstance(logging.lastResort, _WarningLines):
            logging.lastResort = _WarningLines(logging.lastResort)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click_errors.NoArgsIsHelpError as shown:  # help was printed: not an error
            shown.show()
            sys.exit(0)
        except click_errors.ClickException as error:
            context = getattr(error, "ctx", None)
            where = f" (see '{context.command_path} --help')" if context is not None else ""
            _error_line(f"{error.format_message().rstrip('.')}{where}")
            sys.exit(
                EXIT_BAD_INPUT if isinstance(error, click_errors.UsageError) else error.exit_code
            )
        except typer.Abort:
            _error_line("aborted")
            sys.exit(EXIT_FAILED)
        if not standalone_mode:
            return code
        sys.exit(code if isinstance(code, int) else 0)


def plain_console(stderr: bool = False, soft_wrap: bool = False) -> Console:
    """A Rich console that prints text as given: no markup ("[/]" in a user's text crashed
    `assay detect`, "[see note 3]" vanished) and no highlighting of numbers or paths."""
    return Console(markup=False, highlight=False, stderr=stderr, soft_wrap=soft_wrap)


class _WarningLines(logging.Handler):
    """Warnings logged by the library, said as the CLI's own ("warning: …" in yellow) rather
    than as bare lines. It stands in for `logging.lastResort`, so it speaks only while no
    logging is configured (`assay serve` configures its own); errors go to the one before it.
    """

    def __init__(self, errors: logging.Handler | None) -> None:
        super().__init__(logging.WARNING)
        self.errors = errors

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.ERROR:
            if self.errors is not None:
                self.errors.handle(record)
            return
        warn(record.getMessage())


def _error_line(message: str) -> None:
    one_line = " ".join(message.split())
    plain_console(stderr=True, soft_wrap=True).print(Text(f"error: {one_line}", style="bold red"))


def option_label(field: str, options: Mapping[str, str]) -> str:
    """`generated_text` -> `--response (generated_text)`; unknown names stay as they are, and a
    positional argument (`OUTPUT`) replaces the field's name."""
    labels = []
    for part in field.split(", "):
        base = re.split(r"[.\[]", part, maxsplit=1)[0]
        option = options.get(base)
        if option is None or option == "--" + part.replace("_", "-") or option[0] != "-":
            labels.append(option or part)
        else:
            labels.append(f"{option} ({part})")
    return ", ".join(labels)


def fail(message: str, code: int) -> typer.Exit:
    """Print `message` as one red error line; returns the Exit to raise with `code`."""
    _error_line(message)
    return typer.Exit(code)


def outcome_code(gate_failures: Sequence[str], rows_errored: int, allow_errors: bool) -> int:
    """The exit code of a gated command once its work is done: 1 when a gate failed, else 3 when
    rows errored and `--allow-errors` was not given, else 0. The JUnit file follows the same
    rule (failed gates are failures, errored rows errors unless allowed), so the two agree."""
    if gate_failures:
        return EXIT_FAILED
    if rows_errored and not allow_errors:
        return EXIT_ROWS_ERRORED
    return 0


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
        # Named by detector, not by the request's wire path ("[0].config.…"), which the
        # command line never showed.
        raise fail(f"{error.detector}: failed: {error.failure}", EXIT_FAILED) from None
    except Exception as error:  # anything else still gets one line, not a traceback
        raise fail(str(error) or type(error).__name__, EXIT_FAILED) from None


def _rate_text(rate: float | None) -> str:
    """ "12.3 rows/s"; slow work (an LLM, a system under test) in s/row, never "0.0 rows/s"."""
    if not rate:
        return "– rows/s"
    if rate < 0.95:
        return f"{1 / rate:.1f} s/row"
    return f"{rate:.1f} rows/s"


class RateColumn(ProgressColumn):
    """Rows per second so far."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text(_rate_text(speed), style="progress.data.speed")


class ProgressDisplay(Protocol):
    """What commands update as work is done: a Rich bar or `LineProgress`."""

    def update(
        self, task_id: TaskID, *, total: float | None = None, completed: float | None = None
    ) -> None: ...


class LineProgress:
    """Progress for a log rather than a terminal (stderr not a TTY): a plain line every
    `interval` seconds with rows done, rows/s and the time left, and a last line at the end.
    A bar that redraws itself would leave only its final state in a CI log.

    The first `completed` it is given is where the run starts (the rows a resumed run found
    done, 0 for a fresh one), so callers give it before any work."""

    def __init__(self, label: str, console: Console, interval: float) -> None:
        self.label = label
        self.console = console
        self.interval = interval
        self.total: float | None = None
        self.completed = 0.0
        self._start = time.monotonic()
        self._first: float | None = None  # rows done at the first update (resumed rows)
        self._printed_at: float | None = None
        self._lock = threading.Lock()  # `tick` runs on a thread of its own
        self._finished = False  # no tick after the last line

    def update(
        self, task_id: TaskID, *, total: float | None = None, completed: float | None = None
    ) -> None:
        with self._lock:
            if total is not None:
                self.total = total
            if completed is None:
                return
            self.completed = completed
            if self._first is None:
                self._first = completed
                return
            now = time.monotonic()
            if self._printed_at is None or now - self._printed_at >= self.interval:
                self._printed_at = now
                self._print(now)

    def tick(self) -> None:
        """A line if none was printed for `interval` seconds: rows can take long to come back
        (an LLM run reports them a batch at a time), and a silent log looks like a hung run."""
        with self._lock:
            if self._first is None or self._finished:
                return
            now = time.monotonic()
            if now - (self._printed_at or self._start) >= self.interval:
                self._printed_at = now
                self._print(now)

    def _rate(self, now: float) -> float | None:
        elapsed = now - self._start
        done = self.completed - (self._first or 0.0)
        return done / elapsed if elapsed > 0 and done > 0 else None

    def _print(self, now: float) -> None:
        rate = self._rate(now)
        total = f"/{self.total:,.0f}" if self.total is not None else ""
        speed = _rate_text(rate)
        eta = ""
        if rate and self.total is not None:
            eta = f", ETA {_duration((self.total - self.completed) / rate)}"
        self.console.print(f"{self.label}: {self.completed:,.0f}{total} rows, {speed}{eta}")

    def finish(self) -> None:
        with self._lock:
            self._finished = True
            self._finish()

    def _finish(self) -> None:
        if self._first is None:  # nothing was done (a finished run asked again): no line
            return
        now = time.monotonic()
        rate = self._rate(now)
        speed = f" ({_rate_text(rate)})" if rate else ""
        # Rows a resumed run found done are not this run's work: "400 rows done in 4s" was
        # said of 176.
        before = f"; {self._first:,.0f} were done before" if self._first else ""
        self.console.print(
            f"{self.label}: {self.completed - (self._first or 0):,.0f} rows done in "
            f"{_duration(now - self._start)}{speed}{before}"
        )


def _tick_until(lines: LineProgress, stop: threading.Event) -> None:
    while not stop.wait(lines.interval):
        lines.tick()


def _duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"


def _progress_interval(console: Console) -> float:
    """`$ASSAY_PROGRESS_SECONDS`; a value that is no number of seconds ≥ 0 is named in a
    warning and the default used (it was replaced in silence)."""
    given = os.environ.get(PROGRESS_SECONDS_ENV, "").strip()
    if not given:
        return DEFAULT_PROGRESS_SECONDS
    try:
        seconds = float(given)
    except ValueError:
        seconds = math.nan
    if not seconds >= 0:  # NaN too
        console.print(
            f"warning: {PROGRESS_SECONDS_ENV}={given[:40]!r} is not a number of seconds (0 or "
            f"more); using {DEFAULT_PROGRESS_SECONDS:g}"
        )
        return DEFAULT_PROGRESS_SECONDS
    return seconds


@contextmanager
def progress_bar(label: str) -> Iterator[tuple[ProgressDisplay, TaskID]]:
    """Progress on stderr with rows/s and ETA; set its total once known. On a terminal it is a
    bar; otherwise (a CI log) a line every few seconds (`$ASSAY_PROGRESS_SECONDS`, default 5)."""
    console = plain_console(stderr=True, soft_wrap=True)
    if not console.is_terminal:
        lines = LineProgress(label, console, _progress_interval(console))
        stop = threading.Event()
        if lines.interval > 0:
            threading.Thread(target=_tick_until, args=(lines, stop), daemon=True).start()
        try:
            yield lines, TaskID(0)
        finally:
            stop.set()
        lines.finish()
        return
    progress = Progress(
        TextColumn(label),
        BarColumn(),
        MofNCompleteColumn(),
        RateColumn(),
        TimeRemainingColumn(),
        console=console,
    )
    with progress:
        yield progress, progress.add_task(label, total=None)


def note(message: str) -> None:
    """One plain line on stderr about what a command is doing (resuming, already complete)."""
    plain_console(stderr=True, soft_wrap=True).print(" ".join(message.split()))


def warn(message: str) -> None:
    """One yellow warning line on stderr."""
    plain_console(stderr=True, soft_wrap=True).print(
        Text(f"warning: {' '.join(message.split())}", style="yellow")
    )


def print_plan(
    settings: LLMSettings, estimate: CostEstimate, rows: int, as_json: bool = False
) -> None:
    """Show a dry run's numbers on stdout.

    settings: the LLM judge's settings (endpoint, model, strategy, votes).
    estimate: calls and tokens the run would spend.
    rows: rows that would call the LLM.
    as_json: one JSON object instead of the table.
    """
    if as_json:
        plan = {
            "endpoint": settings.base_url,
            "model": settings.model,
            "strategy": settings.strategy,
            "votes_without_logprobs": settings.votes,
            "rows_calling_the_llm": rows,
            **asdict(estimate),
        }
        typer.echo(json.dumps(plan, indent=2))
        return
    if rows == 0 and estimate.questions == 0:
        # The embedded judge (or rows it alone scores): no endpoint, model or votes to show.
        typer.echo("dry run: no row would call an LLM (the judge is offline); nothing to estimate")
        return
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
    console = plain_console()
    console.print(table)
    if estimate.logprobs is None:
        note = (
            "No probe of this endpoint is on record: counted as if it returns logprobs; if it "
            f"does not, each call becomes {settings.votes} sampled calls."
        )
    elif estimate.logprobs:
        note = "The last probe of this endpoint found it returns logprobs."
    else:
        note = (
            "The last probe of this endpoint found no logprobs: counted as "
            f"{settings.votes} sampled calls (votes) each."
        )
    console.print(note, soft_wrap=True)


def print_usage(usage: Usage, rows_with_calls: int, rows: int, label: str = "LLM") -> None:
    """One line with a run's LLM accounting (nothing when no LLM was involved).

    label: what the figures cover, e.g. "LLM" for what this command sent."""
    if usage.is_empty():
        return
    parts = [
        f"{label}: {usage.calls} calls over {rows_with_calls} of {rows} rows",
        f"{usage.prompt_tokens} prompt + {usage.completion_tokens} completion tokens",
        f"{usage.cached_calls} answered by the cache",
    ]
    if usage.escalated:
        parts.append(f"{usage.escalated} instructions escalated by the cascade")
    if usage.voted:
        parts.append(f"{usage.voted} instructions answered by sampled votes (no logprobs)")
    if usage.probe_calls:
        parts.append(f"{usage.probe_calls} capability probe calls")
    if usage.disagreements:
        parts.append(
            f"{usage.disagreements} written answers disagreed with their probability (their "
            "explanations say so, with explanations on)"
        )
    plain_console().print("; ".join(parts), soft_wrap=True)


def ignore_further_interrupts() -> None:
    """Once a run has stopped on Ctrl-C or SIGTERM and is saying so: a second signal (a Ray
    run's workers share the terminal's process group) broke Ray's shutdown at exit with a
    traceback. From the main thread only, as signal handlers are."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)


@contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM (a container stop, `kill`) ends a run like Ctrl-C: said, not silent."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)

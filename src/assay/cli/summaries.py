"""What `assay run` prints when it is done: the per-scorer table, instruction pass rates,
failed rows, probe warnings, LLM usage and where results were written or published."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.table import Table
from rich.text import Text

from assay.cli.common import plain_console, print_usage
from assay.cli.ood import print_ood_summary
from assay.runner.output import id_text
from assay.runner.publish import PublishCounts
from assay.runner.rows import INVALID_ROW, TIMEOUT
from assay.runner.summary import PASS_THRESHOLD, RunSummary

#: How the run summary names each kind of failed row.
_FAILURE_WORDS = {INVALID_ROW: "rejected", TIMEOUT: "timed out", "judge_error": "judge failed"}


def _percent(value: float | None) -> str:
    return "–" if value is None else f"{value:.0%}"


def print_run_summary(summary: RunSummary) -> None:
    """The run's tables on stdout, then notes about failed rows, probes and LLM usage."""
    console = plain_console()
    table = Table(
        title=f"{summary.rows} row{'' if summary.rows == 1 else 's'} from {summary.input_path}"
    )
    table.add_column("scorer", style="bold")
    table.add_column("scored", justify="right")
    table.add_column("mean score", justify="right")
    # A metric whose config rescales or inverts its score passes at the same share of its own
    # range, counted from its best end.
    unit = all(n.scale.is_unit and not n.scale.inverted for n in summary.detectors.values())
    table.add_column(f"score ≥ {PASS_THRESHOLD}" if unit else "passing", justify="right")
    table.add_column("errored", justify="right")
    rates = Table(title="instruction pass rates")
    rates.add_column("scorer", style="bold")
    rates.add_column("instruction")
    rates.add_column("followed", justify="right")
    for name, numbers in summary.detectors.items():
        table.add_row(
            name,
            str(numbers.rows_scored),
            "–" if numbers.mean_score is None else f"{numbers.mean_score:.3f}",
            _percent(numbers.share_passing)
            + ("" if unit else f" ({numbers.scale.pass_label(PASS_THRESHOLD)})"),
            Text(str(numbers.rows_errored), style="red" if numbers.rows_errored else ""),
        )
        for check, rate in numbers.instruction_pass_rates().items():
            rates.add_row(name, check, _percent(rate))
        rates.add_section()
    console.print(table)
    # Metrics such as llm.ood_detection have no instructions: their own summary follows.
    if any(numbers.answered for numbers in summary.detectors.values()):
        console.print(rates)
    if summary.rows_with_errors:
        # Rejected rows, then rows a scorer failed on (their failures are listed together; the
        # line counted only the first and listed both).
        notes = []
        if summary.rows_failed:
            why = ", ".join(
                f"{count} {_FAILURE_WORDS.get(kind, kind)}"
                for kind, count in summary.failures_by_kind.items()
            )
            notes.append(f"{summary.rows_failed} of {summary.rows} rows were not scored ({why})")
        if scorer_errors := summary.rows_with_errors - summary.rows_failed:
            rows = "row" if scorer_errors == 1 else "rows"
            notes.append(f"{scorer_errors} {rows} of {summary.rows} had a scorer error")
        console.print(
            Text(
                f"{'; '.join(notes)}; see their 'error' field in {summary.output_path}",
                style="yellow",
            ),
            soft_wrap=True,
        )
        shown = summary.failures[:LISTED_ON_TERMINAL]
        for failure in shown:
            console.print(Text(f"  {_failure_line(failure)}", style="yellow"), soft_wrap=True)
        if (more := summary.rows_with_errors - len({f.get("row") for f in shown})) > 0:
            console.print(Text(f"  … and {more:,} more rows"))
    for name, numbers in summary.detectors.items():
        if numbers.metric_tally is not None:
            print_ood_summary(numbers.metric_tally.summary(), name)
    # Read from the output's rows: a resumed, retried or finished run's figures include what
    # earlier commands sent for it, so the line says so rather than pass for this one's spend.
    label = "LLM, as recorded on the output's rows (earlier runs of it included)"
    print_usage(summary.usage, summary.rows_with_calls, summary.rows, label)
    if not summary.already_complete:  # else nothing was written, and the note says so
        console.print(f"wrote {summary.output_path} and {summary.summary_path}", soft_wrap=True)


#: Failed rows named one per line under the summary; the rest are in the output and summary.
LISTED_ON_TERMINAL = 5


def _failure_line(failure: Mapping[str, Any]) -> str:
    """ "row 79 (id r79): generated_text: must not be empty"."""
    named = f" (id {id_text(failure['id'])})" if failure.get("id") is not None else ""
    return (
        f"row {failure.get('row')}{named}: {failure.get('field', 'row')}: {failure.get('message')}"
    )


def print_published(counts: PublishCounts, target: Mapping[str, str]) -> None:
    """One line: how many rows went to which server, application and model."""
    where = (
        f"{target['base_url']} (application {target['application_name']}, "
        f"model {target['model_name']})"
    )
    parts = [f"published {counts.sent:,} rows to {where}"]
    if counts.resumed_after_row:
        parts.append(f"continuing after row {counts.resumed_after_row:,}")
    if counts.skipped:
        reasons = ", ".join(f"{n} {reason}" for reason, n in counts.skipped_reasons.items())
        parts.append(f"{counts.skipped:,} rows not sent ({reasons})")
    plain_console().print("; ".join(parts), soft_wrap=True)

"""`--retry-failed`: score again only the rows of a finished run that failed.

A row failed when it has an `error` (unreadable, invalid, timed out) or when any detector or
metric in it carries an error object. Those rows are read again from the input (they may have
been fixed there), scored, and put back in place: the new output is written beside the old one
and renamed over it only when complete, so a retry killed half-way leaves the old output whole.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping, Sequence
from itertools import zip_longest
from pathlib import Path
from typing import Any, NoReturn

from assay.judges.embedded.embedding_cache import shared_cache
from assay.runner.carried import CarriedColumn, carried_columns
from assay.runner.checkpoint import checkpoint_path_for
from assay.runner.io import read_rows
from assay.runner.local import (
    ProgressCallback,
    RunControl,
    RunOptions,
    check_run_output,
    finished_fingerprint,
    prepare_run,
    run_fingerprint,
    score_rows,
    settings_fingerprint,
    write_summary,
)
from assay.runner.lock import output_lock
from assay.runner.output import iter_output_lines, iter_output_lines_typed
from assay.runner.rows import RowScorer
from assay.runner.summary import RunSummary
from assay.runner.writers import writer_for
from assay.schema import RequestValidationError


def line_failed(line: Mapping[str, Any], names: Sequence[str]) -> bool:
    """Whether an output line holds an error for the row or for any of `names`."""
    if isinstance(line.get("error"), Mapping):
        return True
    return any(
        isinstance(line.get(name), Mapping) and line[name].get("error") is True for name in names
    )


async def retry_failed_async(
    input_path: Path,
    output_path: Path,
    scorer: RowScorer,
    options: RunOptions,
    on_progress: ProgressCallback | None = None,
) -> tuple[RunSummary, int]:
    """Rescore the failed rows of `output_path` from `input_path`.

    Returns the new summary and how many rows were retried; with none to retry, nothing is
    scored and the summary says `already_complete`.
    """
    cache_before = shared_cache().stats()
    output_path = prepare_run(input_path, output_path, scorer, options)
    # One run writes an output at a time (`runner.lock`).
    with output_lock(output_path):
        if not output_path.exists():
            raise RequestValidationError(
                "out", f"{output_path} does not exist; run without --retry-failed first"
            )
        if checkpoint_path_for(output_path).exists():
            raise RequestValidationError(
                "out",
                "that run is unfinished; rerun the same command without --retry-failed to "
                "finish it",
            )
        check_run_output(output_path)
        settings = settings_fingerprint(scorer)
        if finished_fingerprint(output_path, "settings") not in (None, settings):
            raise RequestValidationError(
                "retry_failed",
                f"{output_path} was scored with other options: other detectors, explain, "
                "judge (--judge), LLM judge settings that decide verdicts (model, strategy, "
                "structured, votes, max_tokens…: --llm or $ASSAY_LLM_*), or metric config; "
                "retry with the same ones, or rerun without --retry-failed and with "
                "--overwrite to score every row anew (a run that failed for a wrong model, "
                "say)",
            )
        failed = {
            int(line["row"])
            for line in iter_output_lines(output_path)
            if line_failed(line, scorer.score_names)
        }
        carried = carried_columns(input_path, scorer)
        check_same_rows(input_path, output_path, scorer, failed, carried)
        if failed:
            rows = [row for row in read_rows(input_path, scorer.column_map) if row[0] in failed]
            done = 0
            if on_progress is not None:  # the count starts here (a rate needs its start)
                on_progress(0)

            def advance(count: int) -> None:
                nonlocal done
                done += count
                if on_progress is not None:
                    on_progress(done)

            rescored = {
                line["row"]: line for line in await score_rows(rows, scorer, options, advance)
            }
            _replace_lines(output_path, rescored, scorer.score_names, carried, options)
        # With rows retried, the output holds this input's run (its failed rows may have been
        # fixed there), as a fresh run of it would: the same command then finds it complete, and
        # the old input is another run. With none, it is the run it was.
        run = run_fingerprint(input_path, scorer, RunControl()) if failed else None
        run = run or finished_fingerprint(output_path)
        embedding = shared_cache().stats().since(cache_before)
        summary = write_summary(
            input_path, output_path, scorer.score_names, run, embedding, settings
        )
        summary.already_complete = not failed
        return summary, len(failed)


def check_same_rows(
    input_path: Path,
    output_path: Path,
    scorer: RowScorer,
    failed: Collection[int],
    carried: Sequence[CarriedColumn],
) -> None:
    """Refuse a retry whose input does not hold the finished run's rows: a failed row may have
    been fixed in the input, but every other row must be where it was, with the same text, or
    the retried rows would land in the wrong places.

    carried: the input columns the output carries (`carried_columns`), the texts compared.
    """
    column_map = dict(getattr(scorer, "column_map", ()))
    sources = {name: column_map.get(name, name) for name, _ in carried}

    def refuse(problem: str) -> NoReturn:
        raise RequestValidationError(
            "retry_failed",
            f"{input_path} does not hold the rows of the run in {output_path} ({problem}); "
            "score it afresh with --overwrite",
        )

    lines = iter_output_lines(output_path)
    for line, row in zip_longest(lines, read_rows(input_path, scorer.column_map)):
        if line is None or row is None:
            refuse("the row counts differ")
        number, fields = row
        if int(line["row"]) != number:
            refuse(f"row {number} of the input is row {line['row']} of the output")
        if number in failed:
            continue
        if not isinstance(fields, Mapping):  # it was scored, so it could be read then
            refuse(f"row {number} can no longer be read")
        for name in sources:  # texts only: other values may be normalised (NaN written as null)
            given, kept = _text(fields.get(sources[name])), _text(line.get(name))
            if kept is not None and fields.get(sources[name]) is None:
                refuse(f"row {number} has lost its {name}")
            if given is not None and kept is not None and given != kept:
                refuse(f"row {number} has another {name}")


def _text(value: Any) -> str | tuple[str, ...] | None:
    """A text, or a list of texts (a context's documents), in a form to compare; None for
    anything else."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return tuple(value)
    return None


def _replace_lines(
    output_path: Path,
    replacements: Mapping[int, dict[str, Any]],
    names: Sequence[str],
    carried: Sequence[CarriedColumn],
    options: RunOptions,
) -> None:
    batch_size = options.stream_batch_size
    temporary = output_path.with_name(f"{output_path.stem}.retry{output_path.suffix}")
    writer = writer_for(temporary, names, carried)
    writer.start(None)
    try:
        batch: list[dict[str, Any]] = []
        # A kept row's carried columns are copied as typed (a date stays a date in Parquet).
        kept = iter_output_lines_typed(output_path, [name for name, _ in carried])
        for line in kept:
            batch.append(replacements.get(int(line["row"]), line))
            if len(batch) >= batch_size:
                writer.write_batch(batch)
                batch = []
        if batch:
            writer.write_batch(batch)
        writer.finish()
    finally:
        writer.close()
    os.replace(temporary, output_path)

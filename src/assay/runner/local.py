"""The local engine: score a dataset in this process, in streaming batches, resumably.

Rows are read a stream batch at a time (`stream_batch_size`), split into judge calls of
`batch_size` rows, up to `workers` calls in flight at once, and written in input order. After
every stream batch the output is made durable and a checkpoint saved (see `checkpoint.py`), so a
run killed at any point and started again with the same arguments continues where it stopped and
ends with the same output an uninterrupted run writes. Memory holds one stream batch, not the file.

The summary is rebuilt from the finished output file, so it is the same however many times the
run was interrupted.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, is_dataclass
from pathlib import Path
from typing import Any

from assay._sync import blocking
from assay.environment import default_judge_name
from assay.judges import verdict_settings
from assay.judges.embedded.embedding_cache import CacheStats, shared_cache
from assay.judges.openai.settings import configured_settings
from assay.judges.usage import collect_usage, open_ledger
from assay.runner.carried import carried_columns
from assay.runner.checkpoint import (
    Checkpoint,
    checkpoint_path_for,
    fingerprint,
    load_checkpoint,
    read_checkpoint,
    remove_checkpoint,
    save_checkpoint,
)
from assay.runner.io import Row, check_readable, has_rows, read_rows
from assay.runner.lock import output_lock
from assay.runner.output import (
    check_output_path,
    iter_output_lines,
    recorded_summary,
    summary_path_for,
)
from assay.runner.publish import (
    PUBLISH_BATCH_SIZE,
    PublishCounts,
    Publisher,
    publish_output,
)
from assay.runner.rows import TIMEOUT, DetectorScorer, RowScorer, apply_column_map
from assay.runner.summary import RunSummary
from assay.runner.writers import Line, writer_for
from assay.schema import RequestValidationError

logger = logging.getLogger(__name__)

#: Rows per judge call unless told otherwise.
DEFAULT_BATCH_SIZE = 16
#: Rows read, written and checkpointed together unless told otherwise (a metric's manifest may
#: set its own).
DEFAULT_STREAM_BATCH_SIZE = 256

#: Called as rows are scored with the number of rows done so far (including resumed ones).
ProgressCallback = Callable[[int], None]


@dataclass(frozen=True)
class RunOptions:
    """How a run is carried out; none of these change what a row scores.

    batch_size: rows per judge call.
    stream_batch_size: rows read, written and checkpointed together.
    workers: judge calls in flight at once.
    row_timeout: seconds each row may take (a call on k rows gets k times this); a row past it
        gets an error of kind "timeout" and can be retried with --retry-failed. None: no limit.
    """

    batch_size: int = DEFAULT_BATCH_SIZE
    stream_batch_size: int = DEFAULT_STREAM_BATCH_SIZE
    workers: int = 1
    row_timeout: float | None = None

    def check(self) -> None:
        for name in ("batch_size", "stream_batch_size", "workers"):
            if getattr(self, name) < 1:
                raise RequestValidationError(name, f"must be at least 1, got {getattr(self, name)}")
        if self.row_timeout is not None and not self.row_timeout > 0:  # NaN fails too
            raise RequestValidationError(
                "row_timeout", f"must be a positive number of seconds, got {self.row_timeout}"
            )


def default_output_path(input_path: Path) -> Path:
    """`<input stem>.scored.jsonl` next to the input."""
    return input_path.with_name(f"{input_path.stem}.scored.jsonl")


def scorer_fingerprint(scorer: RowScorer) -> dict[str, Any]:
    """The scorer's settings, for the checkpoint fingerprint, with what decides an LLM judge's
    verdicts (`verdict_settings`) when one is used: resuming, or finding a run finished, under
    another model or band would mix two judges in one output. The embedded judge adds nothing,
    so its runs keep their fingerprints."""
    if is_dataclass(scorer) and not isinstance(scorer, type):
        found: dict[str, Any] = {"scorer": type(scorer).__name__, "settings": asdict(scorer)}
    else:
        found = {"scorer": type(scorer).__name__, "settings": repr(scorer)}
    if isinstance(scorer, DetectorScorer):
        name = scorer.judge or default_judge_name()
        if name != "embedded":
            found["judge"] = verdict_settings(name)
    elif (llm := configured_settings()) is not None:  # a metric asks the LLM when one is set
        found["llm"] = llm.verdict_settings()
    return found


def _stream_batches(rows: Iterator[Row], size: int, skip: int) -> Iterator[list[Row]]:
    batch: list[Row] = []
    for row in rows:
        if row[0] <= skip:
            continue
        batch.append(row)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


async def score_rows(
    rows: Sequence[Row],
    scorer: RowScorer,
    options: RunOptions,
    on_rows_done: Callable[[int], None] | None = None,
) -> list[dict[str, Any]]:
    """Score `rows` in calls of `batch_size`, `workers` at a time; lines come back in order."""
    chunks = [rows[i : i + options.batch_size] for i in range(0, len(rows), options.batch_size)]
    slots = asyncio.Semaphore(options.workers)

    async def score_chunk(chunk: Sequence[Row]) -> list[dict[str, Any]]:
        async with slots:
            lines = await _score_with_timeout(chunk, scorer, options.row_timeout)
        if on_rows_done is not None:
            on_rows_done(len(chunk))
        return lines

    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(score_chunk(chunk)) for chunk in chunks]
    return [line for task in tasks for line in task.result()]


async def _score_with_timeout(
    chunk: Sequence[Row], scorer: RowScorer, row_timeout: float | None
) -> list[dict[str, Any]]:
    """Score a call's rows. When the call fails as a whole (it runs out of time, or raises),
    its rows are scored again one by one, so that one slow or poisonous row fails alone. LLM
    usage is kept on one ledger across those tries: the calls of a try that timed out were
    made (and paid for), so they count on the row's line, scored or not."""
    if open_ledger() is None:
        with collect_usage():
            return await _score_with_timeout(chunk, scorer, row_timeout)
    limit = None if row_timeout is None else row_timeout * len(chunk)
    try:
        return await asyncio.wait_for(scorer.score(chunk), timeout=limit)
    except TimeoutError as error:
        failure: Exception = error
    except Exception as error:
        logger.warning("a call on %d rows failed (%s)", len(chunk), error)
        failure = error
    if len(chunk) > 1:
        lines = []
        for row in chunk:
            lines.extend(await _score_with_timeout([row], scorer, row_timeout))
        return lines
    [(number, fields)] = chunk
    column_map = dict(getattr(scorer, "column_map", ()))
    given = None if isinstance(fields, Exception) else apply_column_map(fields, column_map)
    if isinstance(failure, TimeoutError):
        message = f"not scored within {row_timeout:g} s per row"
        return [scorer.failure_line(number, given, TIMEOUT, message)]
    message = f"{type(failure).__name__}: {failure}"
    return [scorer.failure_line(number, given, "judge_error", message)]


def prepare_run(
    input_path: Path, output_path: Path | None, scorer: RowScorer, options: RunOptions
) -> Path:
    """Check everything a run needs before it reads a row; returns the output path.

    Raises RequestValidationError naming what is unusable (input, scorer, options, output).
    """
    check_readable(input_path)
    scorer.check()
    options.check()
    scorer.check_input(input_path)
    if not has_rows(input_path):
        raise RequestValidationError("FILE", f"{input_path} holds no rows to score")
    output_path = output_path or default_output_path(input_path)
    check_output_path(output_path)
    # A hard link is the input under another name: replacing it would empty the input.
    if output_path.resolve() == input_path.resolve() or (
        output_path.exists() and output_path.samefile(input_path)
    ):
        raise RequestValidationError("out", "must not be the input file")
    return output_path


def check_run_output(output_path: Path) -> None:
    """Refuse an existing `output_path` that no Assay run wrote (no summary and no checkpoint
    beside it, e.g. a dataset given as --out by mistake): it is not a run to resume, keep or
    retry, and replacing it is the user's call, not advice."""
    if (
        output_path.exists()
        and not summary_path_for(output_path).exists()
        and not checkpoint_path_for(output_path).exists()
    ):
        raise RequestValidationError(
            "out",
            f"{output_path} exists but is no Assay run's output (no "
            f"{summary_path_for(output_path).name} beside it); choose another --out, or pass "
            "--overwrite (restart=True from Python) if that file may be replaced",
        )


@dataclass
class RunControl:
    """How a run starts and what it does besides scoring (none of it changes a row's scores).

    overwrite: start over: drop an unfinished run's checkpoint and replace a finished output.
    keep_finished: never replace a finished output without `overwrite` (what `assay run`
        does): when it holds this very run (same input, options and publishing target) the run
        is already complete and its summary is returned (`already_complete`); another run stops
        with an error saying so. Off, a finished output is scored again and replaced.
    on_progress: called with the number of rows done so far (resumed rows included).
    on_resume: called once with the rows already done, when an unfinished run is resumed.
    publisher: send the results to a server once the output is complete (`runner.publish`).
    on_publish_progress: called with the output rows published so far.
    publish_batch_size: rows per publish request.
    """

    overwrite: bool = False
    keep_finished: bool = False
    on_progress: ProgressCallback | None = None
    on_resume: ProgressCallback | None = None
    publisher: Publisher | None = None
    on_publish_progress: ProgressCallback | None = None
    publish_batch_size: int = PUBLISH_BATCH_SIZE
    published: PublishCounts | None = field(default=None, init=False)


async def run_file_async(
    input_path: str | os.PathLike[str],
    output_path: str | os.PathLike[str] | None = None,
    *,
    scorer: RowScorer | None = None,
    detectors: Sequence[str] | None = None,
    explain: bool | None = None,
    judge: str | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    options: RunOptions | None = None,
    restart: bool = False,
    on_progress: ProgressCallback | None = None,
    control: RunControl | None = None,
) -> RunSummary:
    """Score every row of a JSONL, CSV or Parquet file; write one output record per row.

    input_path: the dataset (format by extension); a `Path` or a string.
    output_path: `.jsonl` or `.parquet`; default `<input stem>.scored.jsonl` next to the input.
        The summary goes to `<output_path>.summary.json`.
    scorer: what scores rows; default a `DetectorScorer(detectors, explain, judge)`.
    detectors / explain / judge: shorthand for the default scorer (see `DetectorScorer`).
    batch_size: rows per judge call, when `options` is not given.
    options: batch sizes, workers, row timeout (see `RunOptions`).
    restart: start over, ignoring an unfinished run's checkpoint (`RunControl.overwrite`).
    on_progress: called with the number of rows done so far.
    control: everything else about how the run goes (see `RunControl`); `restart` and
        `on_progress` are shorthand for two of its fields.

    Raises RequestValidationError (before writing anything) when the input is unusable: missing
    file, unknown extension, unknown detector or judge, output path equal to the input, a
    checkpoint from a run with other input or options, or (with `RunControl.keep_finished`) a
    finished output of another run.
    """
    input_path = Path(input_path)
    output_path = None if output_path is None else Path(output_path)
    scorer = scorer or DetectorScorer(tuple(detectors) if detectors else None, explain, judge)
    options = options or RunOptions(batch_size=batch_size)
    control = control or RunControl(overwrite=restart, on_progress=on_progress)

    async def local_batches(skip: int, advance: ProgressCallback) -> AsyncIterator[Sequence[Line]]:
        for batch in _stream_batches(
            read_rows(input_path, scorer.column_map), options.stream_batch_size, skip
        ):
            yield await score_rows(batch, scorer, options, advance)

    return await drive_run(input_path, output_path, scorer, options, local_batches, control)


#: Yields scored lines a stream batch at a time, skipping rows up to the first argument and
#: reporting rows done through the second.
LineBatches = Callable[[int, ProgressCallback], AsyncIterator[Sequence[Line]]]


def run_fingerprint(input_path: Path, scorer: RowScorer, control: RunControl) -> str:
    """The fingerprint of a run: its input, its scorer's settings and where it publishes."""
    settings = scorer_fingerprint(scorer)
    if control.publisher is not None:
        settings["publish"] = dict(control.publisher.target)
    return fingerprint(input_path, settings)


def resume_checkpoint(
    path: Path, this_run: str, input_path: Path, scorer: RowScorer, control: RunControl
) -> Checkpoint | None:
    """The unfinished run's checkpoint to resume (None when there is none).

    A run that differs only in where it publishes (a wrong server URL, application or model,
    corrected) resumes with the new target as long as it has not sent a row yet; once it has,
    the rest must go where the first rows went. Any other difference is refused as
    `load_checkpoint` says.
    """
    try:
        return load_checkpoint(path, this_run)
    except RequestValidationError:
        old = read_checkpoint(path)
        if old is None or old.publish_target is None or control.publisher is None:
            raise
        settings = {**scorer_fingerprint(scorer), "publish": old.publish_target}
        if fingerprint(input_path, settings) != old.fingerprint:
            raise
        if old.rows_published:
            where = ", ".join(f"{key}={value}" for key, value in old.publish_target.items())
            raise RequestValidationError(
                "publish",
                f"this run already sent {old.rows_published} rows to {where}; rerun with those "
                "publishing options to send the rest, or pass --overwrite to start over",
            ) from None
        old.fingerprint = this_run
        old.publish_target = dict(control.publisher.target)
        return old


async def drive_run(
    input_path: Path,
    output_path: Path | None,
    scorer: RowScorer,
    options: RunOptions,
    batches: LineBatches,
    control: RunControl | None = None,
    elsewhere: Callable[[], tuple[int, int]] | None = None,
) -> RunSummary:
    """Write what an engine scores, durably and resumably, publish it if asked, then write the
    summary (any engine).

    elsewhere: the embedding cache's hits and misses in other processes (the Ray engine's
        actors), added to this process's in the summary.
    """
    control = control or RunControl()
    cache_before = shared_cache().stats()
    output_path = prepare_run(input_path, output_path, scorer, options)
    # One run writes an output at a time (`runner.lock`).
    with output_lock(output_path):
        checkpoint_path = checkpoint_path_for(output_path)
        if control.overwrite:
            remove_checkpoint(checkpoint_path)
        this_run = run_fingerprint(input_path, scorer, control)
        checkpoint = resume_checkpoint(checkpoint_path, this_run, input_path, scorer, control)
        keep = control.keep_finished and not control.overwrite
        publish_only = False
        recorded_cache: CacheStats | None = None
        if checkpoint is None and not control.overwrite:
            # A file no run wrote (a dataset given as the output) is never replaced unasked,
            # from the CLI or from Python (`run_file` replaced it).
            check_run_output(output_path)
        if checkpoint is None and output_path.exists() and keep:
            recorded = recorded_summary(output_path)
            finished = finished_fingerprint(output_path, summary=recorded)
            if finished == this_run:
                settings = settings_fingerprint(scorer)
                summary = write_summary(
                    input_path,
                    output_path,
                    scorer.score_names,
                    this_run,
                    embedding=_recorded_cache_stats(recorded),
                    settings=settings,
                )
                summary.already_complete = True
                return summary
            # This very run, scored before without --publish (or completed by --retry-failed):
            # published as it is, without scoring it again. (Its fingerprint re-reads the
            # input, so it is taken only when publishing.)
            if control.publisher is None or finished != run_fingerprint(
                input_path, scorer, RunControl()
            ):
                raise RequestValidationError(
                    "out",
                    f"{output_path} holds a finished run of other input or options; pass "
                    "--overwrite to replace it, or --retry-failed with that run's own input "
                    "and options to rescore its failed rows",
                )
            sent_to = dict(control.publisher.target)
            checkpoint = Checkpoint(this_run, finished=True, publish_target=sent_to)
            publish_only, recorded_cache = True, _recorded_cache_stats(recorded)
        if checkpoint is None or not checkpoint.finished:  # rows left to score
            await scorer.before_rows()
        if control.publisher is not None:
            await control.publisher.check()
        if checkpoint is not None and control.on_resume is not None and not publish_only:
            control.on_resume(checkpoint.rows_done)
        target = dict(control.publisher.target) if control.publisher is not None else None
        checkpoint = checkpoint or Checkpoint(this_run, publish_target=target)
        output_path.parent.mkdir(parents=True, exist_ok=True)
        # Saved before the output is opened: a run killed in between leaves a checkpoint to resume,
        # never an output file that looks finished.
        save_checkpoint(checkpoint_path, checkpoint)
        # The last run's summary describes an output this run is replacing: an interrupted run
        # must not leave it beside rows it does not describe (the checkpoint marks the output).
        summary_path_for(output_path).unlink(missing_ok=True)
        if not checkpoint.finished:
            await _write_output(
                input_path, output_path, scorer, options, batches, control, checkpoint
            )
        if control.publisher is not None:
            control.published = await publish_output(
                output_path,
                checkpoint,
                lambda state: save_checkpoint(checkpoint_path, state),
                control.publisher,
                control.on_publish_progress,
                control.publish_batch_size,
            )
        other_hits, other_misses = elsewhere() if elsewhere else (0, 0)
        # Publishing alone scored nothing: keep the cache counts of the run that scored the rows.
        embedding = (
            recorded_cache
            if publish_only
            else shared_cache().stats().since(cache_before).plus(other_hits, other_misses)
        )
        summary = write_summary(
            input_path,
            output_path,
            scorer.score_names,
            this_run,
            embedding,
            settings_fingerprint(scorer),
        )
        remove_checkpoint(checkpoint_path)
        return summary


async def _write_output(
    input_path: Path,
    output_path: Path,
    scorer: RowScorer,
    options: RunOptions,
    batches: LineBatches,
    control: RunControl,
    checkpoint: Checkpoint,
) -> None:
    checkpoint_path = checkpoint_path_for(output_path)
    carried = carried_columns(input_path, scorer)
    writer = writer_for(output_path, scorer.score_names, carried)
    writer.start(checkpoint.position if checkpoint.rows_done or checkpoint.position else None)
    done = checkpoint.rows_done
    if control.on_progress is not None:
        control.on_progress(done)

    def advance(count: int) -> None:
        nonlocal done
        done += count
        if control.on_progress is not None:
            control.on_progress(done)

    try:
        async for lines in batches(checkpoint.rows_done, advance):
            writer.write_batch(lines)
            checkpoint.rows_done = int(lines[-1]["row"])
            checkpoint.position = writer.position()
            save_checkpoint(checkpoint_path, checkpoint)
        writer.finish()
    finally:
        writer.close()
    checkpoint.finished = True
    save_checkpoint(checkpoint_path, checkpoint)


def finished_fingerprint(
    output_path: Path, key: str = "fingerprint", summary: Mapping[str, Any] | None = None
) -> str | None:
    """The fingerprint of the run whose summary sits next to `output_path`, if any (`key`
    "settings": that of its scorer's settings alone, see `settings_fingerprint`); summary:
    that summary when already read."""
    value = (summary if summary is not None else recorded_summary(output_path)).get(key)
    return value if isinstance(value, str) else None


def _recorded_cache_stats(summary: Mapping[str, Any]) -> CacheStats | None:
    """The embedding cache counts a run's summary records: a rerun that scores nothing keeps
    those of the run that scored the rows (it wrote zeros over them)."""
    try:
        recorded = summary["embedding_cache"]
        return CacheStats(hits=int(recorded["hits"]), misses=int(recorded["misses"]))
    except (TypeError, KeyError, ValueError):
        return None


def settings_fingerprint(scorer: RowScorer) -> str:
    """A hash of the scorer's settings alone (detectors, options, a metric's config): what a
    `--retry-failed` must share with the run it completes, whose input it may have fixed."""
    settings = json.dumps(scorer_fingerprint(scorer), sort_keys=True, default=str)
    return hashlib.sha256(settings.encode()).hexdigest()


def write_summary(
    input_path: Path,
    output_path: Path,
    names: Sequence[str],
    run: str | None = None,
    embedding: CacheStats | None = None,
    settings: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> RunSummary:
    """Rebuild the summary from the output file and write it next to the output.

    run: the run's fingerprint, recorded so that the same command run again can tell the
        output already holds its results.
    embedding: the embedding cache's counts while the rows were scored.
    settings: `settings_fingerprint` of the scorer, recorded for `--retry-failed`.
    extra: more top-level keys for the file (`assay ood` adds its gates).
    """
    summary_path = summary_path_for(output_path)
    summary = RunSummary(
        names=tuple(names),
        input_path=str(input_path),
        output_path=str(output_path),
        summary_path=str(summary_path),
        fingerprint=run,
        settings=settings,
        embedding_cache=embedding or CacheStats(),
    )
    summary.add_lines(iter_output_lines(output_path))
    data = {**summary.to_dict(), **(extra or {})}
    summary_path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return summary


#: `run_file_async` for synchronous callers.
run_file = blocking(run_file_async)

"""The local engine: score a dataset file in batches in this process.

Each row becomes one request item. Rows are validated one by one (`parse_item`), so a bad row
becomes an `error` line of its own and the other rows are still scored; valid rows go to
`detect_items` a batch at a time, so the judge batches its model work across rows. Output lines
come out in input order, one per input row.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from assay._sync import run_sync
from assay.detectors import DETECTORS
from assay.detectors.evaluate import detect_items, parse_item
from assay.judges import judge_names
from assay.judges.usage import collect_usage, item_key
from assay.runner.io import RowWriter, check_readable, read_rows
from assay.runner.summary import RunSummary
from assay.schema import DetectRequestItem, MustCompute, RequestValidationError

#: Row fields sent to the detectors; every other column is passed through to the output only.
REQUEST_FIELDS = ("user_query", "context", "generated_text", "config")
#: Rows per `detect_items` call unless told otherwise.
DEFAULT_BATCH_SIZE = 16

#: Called after each batch with the number of rows written so far.
ProgressCallback = Callable[[int], None]


def _given(value: Any) -> bool:
    if isinstance(value, str):
        return bool(value.strip())
    if isinstance(value, list):
        return any(isinstance(doc, str) and doc.strip() for doc in value)
    return False


def applicable_detectors(fields: Mapping[str, Any]) -> list[str]:
    """Names of the detectors whose required inputs are all present and non-blank in `fields`."""
    return [
        name
        for name, detector in DETECTORS.items()
        if all(_given(fields.get(required)) for required in detector.required_inputs)
    ]


def check_detector_names(names: Sequence[str]) -> None:
    """Raise RequestValidationError (field "detector") for a name that is not a detector."""
    for name in names:
        if name not in DETECTORS:
            raise RequestValidationError(
                "detector", f"unknown detector {name!r}; known detectors: {', '.join(DETECTORS)}"
            )


def check_judge_name(name: str) -> None:
    """Raise RequestValidationError (field "judge") for a name that is not a registered judge."""
    if name not in judge_names():
        raise RequestValidationError(
            "judge", f"unknown judge {name!r}; known judges: {', '.join(judge_names())}"
        )


def build_request(
    fields: Mapping[str, Any],
    detectors: Sequence[str] | None = None,
    explain: bool = False,
    must_compute: MustCompute = "ignore_failures",
) -> dict[str, Any]:
    """The raw request item (a dict for `parse_item`) for one row's fields.

    detectors: the detectors to run; their options come from the row's `config` when it has an
        entry for them. When None, the row's own `config` is used if it has one, else every
        detector whose required inputs the row has (RequestValidationError if none has them).
    explain: ask every detector for explanations.
    must_compute: what a judge failure does to the item; the runner keeps going per row.
    """
    raw: dict[str, Any] = {name: fields[name] for name in REQUEST_FIELDS if name in fields}
    row_config = raw.get("config")
    if detectors:
        entries = row_config if isinstance(row_config, dict) else {}
        raw["config"] = {name: entries.get(name, {}) for name in detectors}
    elif row_config is None:
        names = applicable_detectors(raw)
        if not names and _given(raw.get("generated_text")):
            missing = sorted(
                {f for d in DETECTORS.values() for f in d.required_inputs if not _given(raw.get(f))}
            )
            needs = "; ".join(
                f"{n} needs {', '.join(d.required_inputs)}" for n, d in DETECTORS.items()
            )
            raise RequestValidationError(", ".join(missing), f"no detector applies ({needs})")
        # With no generated_text at all, ask for every detector so validation names that field.
        raw["config"] = {name: {} for name in names or DETECTORS}
    if explain and isinstance(raw["config"], dict):
        raw["config"] = {
            name: {**entry, "explain": True} if isinstance(entry, dict) else entry
            for name, entry in raw["config"].items()
        }
    raw["must_compute"] = must_compute
    return raw


def default_output_path(input_path: Path) -> Path:
    """`<input stem>.scored.jsonl` next to the input."""
    return input_path.with_name(f"{input_path.stem}.scored.jsonl")


def summary_path_for(output_path: Path) -> Path:
    """`<output>.summary.json` next to the output."""
    return output_path.with_name(f"{output_path.name}.summary.json")


@dataclass
class _Pending:
    """One row waiting for its batch: either a validated item or the reason it was rejected."""

    row: int
    passthrough: dict[str, Any] = field(default_factory=dict)
    item: DetectRequestItem | None = None
    error: dict[str, str] | None = None


def _prepare(
    row: int, fields: dict[str, Any] | Exception, detectors: Sequence[str] | None, explain: bool
) -> _Pending:
    if isinstance(fields, Exception):
        return _Pending(row, error=_error_of(fields, row))
    reserved = {"row", "error", "usage", *REQUEST_FIELDS, *DETECTORS}
    passthrough = {key: value for key, value in fields.items() if key not in reserved}
    try:
        item = parse_item(build_request(fields, detectors, explain), row)
    except RequestValidationError as error:
        return _Pending(row, passthrough, error=_error_of(error, row))
    return _Pending(row, passthrough, item=item)


def _error_of(error: Exception, row: int) -> dict[str, str]:
    if isinstance(error, RequestValidationError):
        # The line already carries the row number; drop parse_item's "[row]." prefix.
        name = error.field.removeprefix(f"[{row}]").lstrip(".") or "row"
        return {"field": name, "message": error.message}
    return {"field": "row", "message": str(error)}


def _line(pending: _Pending, results: Mapping[str, Any] | None) -> dict[str, Any]:
    line: dict[str, Any] = {"row": pending.row}
    if "id" in pending.passthrough:
        line["id"] = pending.passthrough["id"]
    line.update(pending.passthrough)
    if pending.error is not None:
        line["error"] = pending.error
    else:
        line.update(results or {})
    return line


async def _score_batch(
    batch: list[_Pending], judge: str | None, writer: RowWriter, summary: RunSummary
) -> None:
    items = [p.item for p in batch if p.item is not None]
    with collect_usage() as ledger:
        results = iter(await detect_items(items, judge) if items else [])
    for pending in batch:
        line = _line(pending, next(results) if pending.item is not None else None)
        if pending.item is not None:
            # LLM calls and tokens this row cost; absent for judges that make none.
            usage = ledger.take(item_key(pending.item))
            if not usage.is_empty():
                line["usage"] = usage.to_dict()
        writer.write(line)
        summary.add_line(line)
    writer.flush()


async def run_file_async(
    input_path: Path,
    output_path: Path | None = None,
    *,
    detectors: Sequence[str] | None = None,
    explain: bool = False,
    judge: str | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    on_progress: ProgressCallback | None = None,
) -> RunSummary:
    """Score every row of a JSONL or CSV file and write one JSON line per row.

    input_path: the dataset (`.jsonl`/`.ndjson` or `.csv`, by extension).
    output_path: where scored lines go; default `<input stem>.scored.jsonl` next to the input.
        The summary goes to `<output_path>.summary.json`.
    detectors: detectors to run on every row; default: per row, every detector it has inputs for.
    explain: ask for explanations.
    judge: judge backend (default: $ASSAY_JUDGE or "embedded").
    batch_size: rows per `detect_items` call.
    on_progress: called after each batch with the number of rows written so far.

    Raises RequestValidationError (before writing anything) when the input is unusable: missing
    file, unknown extension, unknown detector or judge, output path equal to the input.
    """
    check_readable(input_path)
    if detectors:
        check_detector_names(detectors)
    if judge is not None:
        check_judge_name(judge)
    if batch_size < 1:
        raise RequestValidationError("batch_size", "must be at least 1")
    output_path = output_path or default_output_path(input_path)
    if output_path.resolve() == input_path.resolve():
        raise RequestValidationError("out", "must not be the input file")
    summary_path = summary_path_for(output_path)
    summary = RunSummary(
        input_path=str(input_path), output_path=str(output_path), summary_path=str(summary_path)
    )
    with RowWriter(output_path) as writer:
        batch: list[_Pending] = []
        for row, fields in read_rows(input_path):
            batch.append(_prepare(row, fields, detectors, explain))
            if len(batch) >= batch_size:
                await _score_batch(batch, judge, writer, summary)
                batch = []
                if on_progress is not None:
                    on_progress(summary.rows)
        if batch:
            await _score_batch(batch, judge, writer, summary)
            if on_progress is not None:
                on_progress(summary.rows)
    summary_path.write_text(json.dumps(summary.to_dict(), indent=2) + "\n", encoding="utf-8")
    return summary


def run_file(
    input_path: Path,
    output_path: Path | None = None,
    *,
    detectors: Sequence[str] | None = None,
    explain: bool = False,
    judge: str | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    on_progress: ProgressCallback | None = None,
) -> RunSummary:
    """Synchronous `run_file_async` (safe to call whether or not an event loop is running)."""
    return run_sync(
        run_file_async(
            input_path,
            output_path,
            detectors=detectors,
            explain=explain,
            judge=judge,
            batch_size=batch_size,
            on_progress=on_progress,
        )
    )

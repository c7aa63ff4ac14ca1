"""Read a run's output file back: one dict per input row, in row order.

Output comes as JSON Lines (one object per line) or Parquet (a `record` column holding each
line's JSON, next to flat columns for querying). Reports, `--retry-failed` and the summary all
read output through here, so they see the same lines whichever format was written.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from assay.runner.checkpoint import checkpoint_path_for
from assay.runner.lock import lock_path_for
from assay.schema import RequestValidationError

#: Output formats by extension.
OUTPUT_SUFFIXES = (".jsonl", ".ndjson", ".parquet")
#: The Parquet column that holds each output line as JSON.
RECORD_COLUMN = "record"
#: Keys of an output line that never hold a detector's or metric's result.
NOT_SCORERS = frozenset({"row", "id", "error"})


def id_text(value: Any) -> str:
    """A row's `id` as text for names and messages: text as it is, anything else as JSON
    (a Parquet struct id reads `{"a": 1}`, not Python's `{'a': 1}`)."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        return str(value)


def is_scored_result(value: Any) -> bool:
    """True for a scorer's result object: a dict whose `score` is a number (not a bool)."""
    if not isinstance(value, Mapping):
        return False
    score = value.get("score")
    return isinstance(score, int | float) and not isinstance(score, bool)


def is_scorer_error(value: Any) -> bool:
    """True for a scorer's error object: `{"error": true, "kind"?, "message"?}`."""
    return isinstance(value, Mapping) and value.get("error") is True


def scorer_results(line: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(name, result) for every detector or metric result or error object in an output line.

    Any key whose value has a numeric `score` counts, so a new detector or metric needs no
    change in what reads output (reports, gates)."""
    for name, value in line.items():
        if name not in NOT_SCORERS and (is_scored_result(value) or is_scorer_error(value)):
            yield name, value


def check_output_path(path: Path) -> None:
    """Raise RequestValidationError (field "out") if `path` has an extension we cannot write,
    or is a place no file can be written (see `check_writable`)."""
    check_output_type(path, "out")
    check_writable(path, "out")


def check_output_type(path: Path, field: str) -> None:
    """Raise RequestValidationError naming `field` unless `path` is JSONL or Parquet output."""
    if path.suffix.lower() not in OUTPUT_SUFFIXES:
        known = ", ".join(OUTPUT_SUFFIXES)
        raise RequestValidationError(
            field, f"unsupported output type {path.suffix or '(none)'!r}; use one of {known}"
        )


def check_writable(path: Path, field: str) -> None:
    """Raise RequestValidationError naming `field` when no file can be written at `path`: it is
    a folder, or a folder it needs is a file. Checked before any work, so a run never ends in
    an error about where its results should go. Missing folders are fine: they are made."""
    if path == Path("."):  # typed as "" too
        raise RequestValidationError(field, "needs a file name (got '' or '.')")
    if path.is_dir():
        raise RequestValidationError(field, f"{path} is a folder; give a file name")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise RequestValidationError(field, f"cannot write {path}: {parent} is a file")
            _try_writing_in(parent, path, field)
            break


def summary_path_for(output_path: Path) -> Path:
    """`<output>.summary.json` next to the output."""
    return output_path.with_name(f"{output_path.name}.summary.json")


def recorded_summary(output_path: Path) -> dict[str, Any]:
    """The summary next to `output_path` as written, or {} when there is none to read."""
    try:
        data = json.loads(summary_path_for(output_path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def files_beside(output_path: Path | None, what: str) -> dict[str, Path | None]:
    """The files a run keeps beside its output (summary, checkpoint, lock), named for the
    messages of `check_not_overwriting` ("the --out file's summary"): a report or JUnit file
    written over one would break the run."""
    if output_path is None:
        return {}
    return {
        f"{what}'s summary": summary_path_for(output_path),
        f"{what}'s checkpoint": checkpoint_path_for(output_path),
        f"{what}'s lock file": lock_path_for(output_path),
    }


def check_not_overwriting(path: Path, field: str, kept: Mapping[str, Path | None]) -> None:
    """Raise RequestValidationError naming `field` when `path` is one of the `kept` files (an
    input, or another output of the same command), which writing it would destroy.

    kept: what each file is, for the message ("the input file", "--out"), to its path.
    """
    for name, other in kept.items():
        if other is None:
            continue
        # A hard link is the same file under another name.
        if path.resolve() == other.resolve() or (
            path.exists() and other.exists() and path.samefile(other)
        ):
            raise RequestValidationError(
                field, f"must not be {name} ({other}): it would be overwritten"
            )


def _try_writing_in(folder: Path, path: Path, field: str) -> None:
    # Permissions alone do not tell (root ignores them; read-only mounts, immutable folders):
    # write and remove a file where the output will go.
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".assay-write-check-"):
            pass
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise RequestValidationError(field, f"cannot write {path}: {reason}") from None


def iter_output_lines(path: Path) -> Iterator[dict[str, Any]]:
    """Yield every output line of a finished run (JSONL or Parquet, by extension)."""
    if path.is_dir():
        raise RequestValidationError("OUTPUT", f"{path} is a folder, not a run's output file")
    if not path.is_file():
        raise RequestValidationError("OUTPUT", f"{path} does not exist")
    check_output_type(path, "OUTPUT")
    if path.suffix.lower() == ".parquet":
        yield from _parquet_lines(path)
        return
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise RequestValidationError(
                    "OUTPUT", f"line {number} of {path} is not UTF-8 text"
                ) from None
            if not text.strip():
                continue
            try:
                value = json.loads(text.rstrip("\r\n"))  # an error's column on this line
            except json.JSONDecodeError as error:
                raise RequestValidationError(
                    "OUTPUT",
                    f"line {number} of {path} is not valid JSON: {error.msg} at column "
                    f"{error.colno}",
                ) from None
            yield checked_line(value, f"line {number} of {path}")


_JSON_TYPES = {list: "a list", str: "text", int: "a number", float: "a number", bool: "true/false"}


def checked_line(value: Any, where: str) -> dict[str, Any]:
    """`value` if it has an output line's shape (an object whose results' instructions_list,
    if any, is a list of objects); else a RequestValidationError saying `where`."""
    if not isinstance(value, dict):
        kind = _JSON_TYPES.get(type(value), "null")
        raise RequestValidationError(
            "OUTPUT", f"{where} is {kind}, not a JSON object; is it an assay output file?"
        )
    for name, result in scorer_results(value):
        entries = result.get("instructions_list", [])
        if not isinstance(entries, list) or not all(isinstance(e, Mapping) for e in entries):
            raise RequestValidationError(
                "OUTPUT", f"{where}: {name}.instructions_list is not a list of objects"
            )
    return value


def _parquet_lines(path: Path, typed: Sequence[str] = ()) -> Iterator[dict[str, Any]]:
    import pyarrow as pa  # imported here: pyarrow is slow to import
    import pyarrow.parquet as pq

    # Unbuffered, one small batch at a time: reading a large output must not grow memory.
    parquet = pq.ParquetFile(path, pre_buffer=False, buffer_size=1 << 20)
    names = parquet.schema_arrow.names
    if RECORD_COLUMN not in names:
        raise RequestValidationError(
            "OUTPUT", f"{path} has no {RECORD_COLUMN!r} column; is it an assay output file?"
        )
    typed = [name for name in typed if name in names and name != RECORD_COLUMN]
    number = 0
    for batch in parquet.iter_batches(columns=[RECORD_COLUMN, *typed], batch_size=1024):
        columns = {name: batch.column(name).to_pylist() for name in typed}
        for index, text in enumerate(batch.column(RECORD_COLUMN).to_pylist()):
            number += 1
            line = checked_line(json.loads(text), f"row {number} of {path}")
            line.update((name, values[index]) for name, values in columns.items())
            yield line
        pa.default_memory_pool().release_unused()


def iter_output_lines_typed(path: Path, columns: Sequence[str]) -> Iterator[dict[str, Any]]:
    """`iter_output_lines`, with a Parquet output's `columns` read from their own typed
    columns rather than from `record` (whose JSON writes a date or bytes as text and NaN as
    null): what rewriting the output needs to keep those values as they were."""
    if path.suffix.lower() != ".parquet":
        yield from iter_output_lines(path)
        return
    check_output_type(path, "OUTPUT")
    yield from _parquet_lines(path, columns)

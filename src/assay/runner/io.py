"""Read dataset rows from JSONL or CSV and write scored rows as JSONL.

Rows stream: nothing holds the whole file in memory. A row that cannot be read (a malformed JSON
line, a CSV row with too many cells) is yielded as an exception in its place, so the caller can
report it and go on with the next row.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO

from assay.schema import RequestValidationError

#: File extensions read as JSON Lines; one JSON object per line.
JSONL_SUFFIXES = (".jsonl", ".ndjson")
#: File extensions read as CSV with a header row.
CSV_SUFFIXES = (".csv",)

#: A row as read: its 1-based number in input order and its fields, or why it could not be read.
Row = tuple[int, dict[str, Any] | Exception]


def check_readable(path: Path) -> None:
    """Raise RequestValidationError (field "FILE") if `path` is missing or of unknown format."""
    if not path.exists():
        raise RequestValidationError("FILE", f"{path} does not exist")
    if not path.is_file():
        raise RequestValidationError("FILE", f"{path} is not a file")
    if path.suffix.lower() not in JSONL_SUFFIXES + CSV_SUFFIXES:
        known = ", ".join(JSONL_SUFFIXES + CSV_SUFFIXES)
        raise RequestValidationError(
            "FILE", f"unsupported file type {path.suffix or '(none)'!r}; use one of {known}"
        )


def read_rows(path: Path) -> Iterator[Row]:
    """Stream the rows of a JSONL or CSV file (format by extension), numbered from 1.

    Checks the file before returning, so a missing file or unknown extension raises here rather
    than on the first `next()`. Blank JSONL lines are skipped and not numbered.
    """
    check_readable(path)
    if path.suffix.lower() in CSV_SUFFIXES:
        return _read_csv(path)
    return _read_jsonl(path)


def count_rows(path: Path) -> int:
    """How many rows `read_rows(path)` will yield (for progress bars); reads the file once."""
    check_readable(path)
    if path.suffix.lower() in CSV_SUFFIXES:
        with path.open(newline="", encoding="utf-8-sig") as handle:
            reader = csv.reader(handle)
            next(reader, None)  # header
            return sum(1 for cells in reader if any(cells))
    with path.open("rb") as handle:
        return sum(1 for line in handle if line.strip())


def _read_jsonl(path: Path) -> Iterator[Row]:
    row = 0
    # Binary, decoded per line: one badly encoded line is one bad row, not a dead run.
    with path.open("rb") as handle:
        for line_number, raw_line in enumerate(handle, start=1):
            if not raw_line.strip():
                continue
            row += 1
            yield row, _parse_json_line(raw_line, line_number)


def _parse_json_line(raw_line: bytes, line_number: int) -> dict[str, Any] | Exception:
    try:
        text = raw_line.decode("utf-8-sig" if line_number == 1 else "utf-8")
    except UnicodeDecodeError as error:
        return RequestValidationError(
            "row", f"line {line_number} is not valid UTF-8 ({error.reason})"
        )
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        return RequestValidationError(
            "row", f"line {line_number} is not valid JSON: {error.msg} at column {error.colno}"
        )
    if not isinstance(value, dict):
        return RequestValidationError("row", f"line {line_number} must be a JSON object")
    return value


def _read_csv(path: Path) -> Iterator[Row]:
    with path.open(newline="", encoding="utf-8-sig") as handle:
        reader = csv.DictReader(handle)
        for row, record in enumerate((r for r in reader if any(r.values())), start=1):
            yield row, _csv_fields(record)


def _csv_fields(record: dict[str | Any, str | Any]) -> dict[str, Any] | Exception:
    if None in record:
        return RequestValidationError("row", "has more cells than the header has columns")
    fields: dict[str, Any] = {}
    for name, cell in record.items():
        # CSV has no null: an empty (or absent) cell means the field is not given.
        if cell is None or cell == "":
            continue
        if name == "context":
            fields[name] = _csv_context(cell)
        elif name == "config":
            try:
                fields[name] = json.loads(cell)
            except json.JSONDecodeError as error:
                return RequestValidationError("config", f"is not valid JSON: {error.msg}")
        else:
            fields[name] = cell
    return fields


def _csv_context(cell: str) -> str | list[Any]:
    """A context cell holding a JSON list is a list of documents; anything else is one document."""
    if cell.lstrip().startswith("["):
        try:
            value = json.loads(cell)
        except json.JSONDecodeError:
            return cell
        if isinstance(value, list):
            return value
    return cell


class RowWriter:
    """Writes one JSON object per line to `path` (UTF-8, created or truncated).

    Use as a context manager. Call `flush()` after each batch so a crashed run keeps what it wrote.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rows_written = 0
        self._handle: TextIO | None = None

    def __enter__(self) -> RowWriter:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._handle = self.path.open("w", encoding="utf-8")
        return self

    def write(self, line: dict[str, Any]) -> None:
        if self._handle is None:
            raise RuntimeError("RowWriter is not open; use it in a with-block")
        self._handle.write(json.dumps(line, ensure_ascii=False) + "\n")
        self.rows_written += 1

    def flush(self) -> None:
        if self._handle is not None:
            self._handle.flush()

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

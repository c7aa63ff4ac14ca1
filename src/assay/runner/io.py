"""Read dataset rows from JSONL, CSV or Parquet.

Rows stream: nothing holds the whole file in memory. A row that cannot be read (a malformed JSON
line, a CSV row with too many cells) is yielded as an exception in its place, so the caller can
report it and go on with the next row.
"""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, TextIO

from assay.schema import (
    RepeatedKeyError,
    RequestValidationError,
    looks_wide,
    unique_keys,
    utf8_problem,
)

#: File extensions read as JSON Lines; one JSON object per line.
JSONL_SUFFIXES = (".jsonl", ".ndjson")
#: File extensions read as CSV with a header row.
CSV_SUFFIXES = (".csv",)
#: File extensions read as Parquet (pyarrow), a record batch at a time.
PARQUET_SUFFIXES = (".parquet", ".pq")
INPUT_SUFFIXES = JSONL_SUFFIXES + CSV_SUFFIXES + PARQUET_SUFFIXES
#: Rows per Parquet record batch read at once.
_PARQUET_BATCH_ROWS = 1024

#: A row as read: its 1-based number in input order and its fields, or why it could not be read.
Row = tuple[int, dict[str, Any] | Exception]


class UnreadableRow(RequestValidationError):
    """A row that cannot be scored, with the columns that were read (its error line carries
    them; the writer puts U+FFFD in place of bytes that were not UTF-8)."""

    def __init__(self, field: str, message: str, fields: dict[str, Any]) -> None:
        super().__init__(field, message)
        self.fields = fields


def check_readable(path: Path) -> None:
    """Raise RequestValidationError (field "FILE") if `path` is missing or of unknown format."""
    if not path.exists():
        raise RequestValidationError("FILE", f"{path} does not exist")
    if not path.is_file():
        raise RequestValidationError("FILE", f"{path} is not a file")
    if path.suffix.lower() not in INPUT_SUFFIXES:
        known = ", ".join(INPUT_SUFFIXES)
        raise RequestValidationError(
            "FILE", f"unsupported file type {path.suffix or '(none)'!r}; use one of {known}"
        )
    if path.suffix.lower() not in PARQUET_SUFFIXES:
        with path.open("rb") as handle:
            if looks_wide(handle.read(4)):
                # Read per line as UTF-8, it would be reported as a row per line, each unreadable.
                raise RequestValidationError(
                    "FILE", f"{path} looks like UTF-16 or UTF-32 text; save it as UTF-8"
                )


def read_rows(path: Path, column_map: Iterable[tuple[str, str]] = ()) -> Iterator[Row]:
    """Stream the rows of a JSONL, CSV or Parquet file (format by extension), numbered from 1.

    Checks the file before returning, so a missing file or unknown extension raises here rather
    than on the first `next()`. Blank JSONL lines are skipped and not numbered.
    column_map: `--map` pairs (FIELD, COLUMN), as a scorer holds them: a CSV's JSON cells
        (`context`, `config`) are read from the columns mapped to them (names are not changed
        here).
    """
    check_readable(path)
    if path.suffix.lower() in CSV_SUFFIXES:
        mapped = dict(column_map)
        return _read_csv(path, {mapped.get(field, field): field for field in JSON_CELLS})
    if path.suffix.lower() in PARQUET_SUFFIXES:
        return _read_parquet(path)
    return _read_jsonl(path)


def count_rows(path: Path) -> int:
    """How many rows `read_rows(path)` will yield (for progress bars); reads the file once."""
    return sum(_row_marks(path))


def has_rows(path: Path) -> bool:
    """Whether `read_rows(path)` yields anything (stops at the first row)."""
    return any(_row_marks(path))


def _row_marks(path: Path) -> Iterator[int]:
    """A positive number per row `read_rows(path)` will yield (Parquet: one, its row count),
    without parsing them; lazy, so `any` stops at the first."""
    check_readable(path)
    if path.suffix.lower() in PARQUET_SUFFIXES:
        yield int(_parquet_file(path).metadata.num_rows)
        return
    if path.suffix.lower() in CSV_SUFFIXES:
        with _open_csv(path) as handle:
            reader = csv.reader(handle)
            next(reader, None)  # header
            yield from (1 for cells in reader if any(cells))
        return
    with path.open("rb") as handle:
        yield from (1 for n, line in enumerate(handle) if not _blank(line, n))


def _blank(line: bytes, index: int) -> bool:
    """Whether a JSONL line holds nothing (the first may hold only a byte-order mark)."""
    return not (line.removeprefix(b"\xef\xbb\xbf") if index == 0 else line).strip()


def _read_jsonl(path: Path) -> Iterator[Row]:
    row = 0
    # Binary, decoded per line: one badly encoded line is one bad row, not a dead run.
    with path.open("rb") as handle:
        for line_number, raw_line in enumerate(handle, start=1):
            if _blank(raw_line, line_number - 1):
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
        # Without its line end, so that an error's column is on this line.
        value = json.loads(text.rstrip("\r\n"), object_pairs_hook=unique_keys)
    except RepeatedKeyError as error:
        # Read again, last copy kept, only so that the row's error line keeps its id and columns.
        fields = json.loads(text)
        return UnreadableRow("row", f"line {line_number}: {error}", fields)
    except json.JSONDecodeError as error:
        return RequestValidationError(
            "row", f"line {line_number} is not valid JSON: {error.msg} at column {error.colno}"
        )
    except ValueError:  # an integer longer than Python converts (4300 digits)
        return RequestValidationError(
            "row",
            f"line {line_number} holds an integer too long to read (over "
            f"{sys.get_int_max_str_digits():,} digits)",
        )
    except RecursionError:
        return RequestValidationError("row", f"line {line_number} is nested too deeply")
    if not isinstance(value, dict):
        return RequestValidationError("row", f"line {line_number} must be a JSON object")
    return value


#: The fields of a row that a request item reads (`runner.rows.build_request`).
REQUEST_FIELDS = ("user_query", "context", "generated_text", "config")

#: Python's csv module refuses a cell over 131,072 characters and ends the whole run; cells are
#: held to the request limits per row instead (a too-long text rejects its row, named).
csv.field_size_limit(2**31 - 1)


def _open_csv(path: Path) -> TextIO:
    # Bytes that are not UTF-8 are kept as surrogate escapes, so that the row holding them is
    # reported as bad (`_csv_fields`) instead of the decoder ending the whole run.
    return path.open(newline="", encoding="utf-8-sig", errors="surrogateescape")


def csv_header(handle: Iterable[str], path: Path) -> list[str]:
    """The column names on a CSV file's first line; RequestValidationError "FILE" when one is
    repeated (a reader would keep the last column's cell and drop the other in silence)."""
    header = next(csv.reader(handle), [])
    repeated = sorted({name for name in header if header.count(name) > 1})
    if repeated:
        names = ", ".join(repr(name) for name in repeated)
        raise RequestValidationError(
            "FILE", f"{path}: the header names {names} more than once; rename the copies"
        )
    return header


#: Fields whose CSV cells hold JSON: a context's list of documents, a row's config object.
JSON_CELLS = ("context", "config")


def _read_csv(path: Path, json_columns: Mapping[str, str]) -> Iterator[Row]:
    with _open_csv(path) as handle:
        reader = csv.DictReader(handle, fieldnames=csv_header(handle, path))
        for row, record in enumerate((r for r in reader if any(r.values())), start=1):
            yield row, _csv_fields(record, json_columns)


def _csv_fields(
    record: dict[str | Any, str | Any], json_columns: Mapping[str, str]
) -> dict[str, Any] | Exception:
    # A bad row still gives the cells that could be read, so its error line keeps its id and
    # carried columns. The first problem found is the one reported.
    problems: list[tuple[str, str]] = []
    if None in record:
        problems.append(("row", "has more cells than the header has columns"))
    fields: dict[str, Any] = {}
    not_utf8 = None
    for name, cell in record.items():
        if name is None:
            continue  # the extra cells
        if not_utf8 is None and any(
            isinstance(text, str) and utf8_problem(text) for text in (name, cell)
        ):
            not_utf8 = str(name)
        # CSV has no null: an empty (or absent) cell means a request field is not given, and
        # is a null in any other column, carried as a JSONL or Parquet null is.
        if cell is None or cell == "":
            if name not in REQUEST_FIELDS and name not in json_columns:
                fields[name] = None
            continue
        field = json_columns.get(name)  # the column `--map` reads a JSON field from
        if field == "context":
            fields[name] = _csv_context(cell)
        elif field == "config":
            try:
                fields[name] = json.loads(cell, object_pairs_hook=unique_keys)
            except RepeatedKeyError as error:  # as a JSONL row's or a server body's
                problems.append((name, str(error)))
            except json.JSONDecodeError as error:
                problems.append((name, f"is not valid JSON: {error.msg}"))
        else:
            fields[name] = cell
    if not_utf8 is not None:
        problems.append((not_utf8, "is not valid UTF-8 text"))
    if problems:
        return UnreadableRow(*problems[0], fields)
    return fields


def _csv_context(cell: str) -> str | list[str]:
    """A context cell holding a JSON list of strings is a list of documents; anything else
    (`[2020, 2021]` too) is one document."""
    if cell.lstrip().startswith("["):
        try:
            value = json.loads(cell)
        except json.JSONDecodeError:
            return cell
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return value
    return cell


def _parquet_file(path: Path) -> Any:
    import pyarrow.parquet as pq  # imported here: pyarrow is slow to import

    try:
        return pq.ParquetFile(path)
    except Exception as error:  # pyarrow raises several types for a file that is not Parquet
        raise RequestValidationError(
            "FILE", f"{path} is not a readable Parquet file: {error}"
        ) from None


def parquet_schema(path: Path) -> Any:
    """The Arrow schema of a Parquet dataset (RequestValidationError "FILE" if unreadable)."""
    return _parquet_file(path).schema_arrow


def _read_parquet(path: Path) -> Iterator[Row]:
    parquet = _parquet_file(path)
    row = 0
    for batch in parquet.iter_batches(batch_size=_PARQUET_BATCH_ROWS):
        for record in batch.to_pylist():
            row += 1
            # A null request field means "not given", as an empty CSV cell does; any other
            # column keeps its null, as a JSONL row's does, so the output carries it alike.
            yield (
                row,
                {
                    name: value
                    for name, value in record.items()
                    if value is not None or name not in REQUEST_FIELDS
                },
            )


def input_columns(path: Path) -> set[str]:
    """The columns a dataset has: the CSV header, the Parquet schema, or the keys of the first
    JSONL row that parses (empty when none does). Used to fail before any call on a file that
    lacks a required column."""
    check_readable(path)
    suffix = path.suffix.lower()
    if suffix in PARQUET_SUFFIXES:
        return set(_parquet_file(path).schema_arrow.names)
    if suffix in CSV_SUFFIXES:
        with _open_csv(path) as handle:
            return set(csv_header(handle, path))
    for _, fields in _read_jsonl(path):
        if isinstance(fields, dict):
            return set(fields)
    return set()

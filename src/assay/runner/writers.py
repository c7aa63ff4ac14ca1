"""Write output lines as JSON Lines or Parquet, durably, in a way a killed run can resume.

Both writers take whole stream batches (`write_batch`), make them durable before returning, and
report a `position` that the checkpoint stores. `resume(position)` throws away anything written
after that position (a batch that was half-written when the run died).

- JSONL goes straight to the output file; the position is its length in bytes.
- Parquet cannot be appended to once its footer is written, so each batch becomes one part file
  in `<output>.parts/`; `finish()` streams the parts into the single output file and removes them.
  Columns: `row`, `id` (as text), `record` (the whole line as JSON, lossless) and one float
  column `<name>.score` per detector or metric, for querying without parsing JSON.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from assay.runner.carried import CarriedColumn, column_array
from assay.runner.output import RECORD_COLUMN
from assay.schema import valid_text

Line = Mapping[str, Any]

logger = logging.getLogger(__name__)


class OutputWriter(Protocol):
    """What the engines need from an output format."""

    def start(self, position: Mapping[str, Any] | None) -> None:
        """Open for a fresh run (position None) or resume at a checkpoint's position."""

    def write_batch(self, lines: Sequence[Line]) -> None:
        """Append lines and make them durable."""

    def position(self) -> dict[str, Any]:
        """What is durable so far, for the checkpoint."""

    def finish(self) -> None:
        """Complete the output file and release everything."""

    def close(self) -> None:
        """Release files without completing (the run stopped early)."""


def writer_for(
    path: Path, score_names: Sequence[str], carried: Sequence[CarriedColumn] = ()
) -> OutputWriter:
    """The writer for `path`'s extension (`.parquet`, else JSON Lines).

    score_names: detectors or metrics whose scores get a `<name>.score` column (Parquet).
    carried: input fields that get a column of their own (Parquet; see `carried.py`).
    """
    if path.suffix.lower() == ".parquet":
        return ParquetWriter(path, score_names, carried)
    return JsonlWriter(path)


class LineEncoder:
    """Turns output lines into JSON text that any parser reads, so that no row's values can
    end a run: NaN and ±Infinity become null (logged once per encoder), text that is not
    valid Unicode gets U+FFFD in place of each lone surrogate, and values JSON has no type for
    (dates, decimals, bytes from Parquet) are written as text."""

    def __init__(self) -> None:
        self.warned_non_finite = False

    def value_text(self, value: Any) -> str:
        """A value that is not text, as the JSON text a string column holds."""
        return self.encode(value)

    def encode(self, line: Any) -> str:
        try:
            text = json.dumps(line, ensure_ascii=False, allow_nan=False)
            text.encode("utf-8")
            return text
        except (ValueError, TypeError):  # UnicodeEncodeError is a ValueError
            return json.dumps(self._clean(line), ensure_ascii=False, allow_nan=False)

    def _clean(self, value: Any, where: str = "") -> Any:
        """`value` made JSON-safe; `where` is its key path in the line ("price", "meta.ratio"),
        for the warning."""
        if isinstance(value, float) and not math.isfinite(value):
            if not self.warned_non_finite:
                self.warned_non_finite = True
                logger.warning(
                    "%s holds NaN or Infinity, which JSON has not; written as null (and so in "
                    "any other row or column that holds one)",
                    where or "the output",
                )
            return None
        if isinstance(value, str):
            return valid_text(value)
        if isinstance(value, Mapping):
            return {
                self._clean(str(key)): self._clean(child, f"{where}.{key}" if where else str(key))
                for key, child in value.items()
            }
        if isinstance(value, list | tuple):
            return [self._clean(child, where) for child in value]
        if value is None or isinstance(value, bool | int | float):
            return value
        return self._clean(as_text(value), where)


def as_text(value: Any) -> str:
    """A value JSON has no type for (a Parquet timestamp, decimal or bytes) as the text the
    output writes: ISO 8601 for a date or time, UTF-8 for bytes, else `str`. The Ray engine's
    trip to its actors uses it too, so both engines write the same text."""
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    if hasattr(value, "isoformat"):
        return str(value.isoformat())
    return str(value)


class JsonlWriter:
    """One JSON object per line, written to the output file as the run goes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._handle: BinaryIO | None = None
        self._encoder = LineEncoder()

    def start(self, position: Mapping[str, Any] | None) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if position is None or not self.path.exists():
            self._handle = self.path.open("wb")
            return
        handle = self.path.open("r+b")
        handle.truncate(int(position.get("bytes", 0)))
        handle.seek(0, os.SEEK_END)
        self._handle = handle

    def write_batch(self, lines: Sequence[Line]) -> None:
        if self._handle is None:
            raise RuntimeError("JsonlWriter.start() was not called")
        text = "".join(self._encoder.encode(line) + "\n" for line in lines)
        self._handle.write(text.encode("utf-8"))
        self._handle.flush()
        os.fsync(self._handle.fileno())

    def position(self) -> dict[str, Any]:
        return {"bytes": self._handle.tell() if self._handle is not None else 0}

    def finish(self) -> None:
        self.close()

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


class ParquetWriter:
    """Parquet output: one part file per batch while running, one file at the end."""

    def __init__(
        self, path: Path, score_names: Sequence[str], carried: Sequence[CarriedColumn] = ()
    ) -> None:
        import pyarrow as pa  # imported here: pyarrow is slow to import

        self.path = path
        self.parts = path.with_name(f"{path.name}.parts")
        self.score_names = list(score_names)
        scores = [(f"{name}.score", pa.float64()) for name in self.score_names]
        taken = {"row", "id", RECORD_COLUMN, *(name for name, _ in scores)}
        # A carried column may not shadow one of ours (an input column named "record", say).
        self.carried = [(name, kind) for name, kind in carried if name not in taken]
        self.schema = pa.schema(
            [("row", pa.int64()), ("id", pa.string()), *self.carried, (RECORD_COLUMN, pa.string())]
            + scores
        )
        self._parts_written = 0
        self._encoder = LineEncoder()
        self._misfit_columns: set[str] = set()  # warned of once each

    def start(self, position: Mapping[str, Any] | None) -> None:
        if position is None:
            shutil.rmtree(self.parts, ignore_errors=True)
            self._parts_written = 0
        else:
            self._parts_written = int(position.get("parts", 0))
            # Parts past the checkpoint belong to a batch that never became durable.
            for part in self.parts.glob("part-*.parquet"):
                if _part_number(part) > self._parts_written:
                    part.unlink()
        self.parts.mkdir(parents=True, exist_ok=True)

    def write_batch(self, lines: Sequence[Line]) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        columns: dict[str, Any] = {
            "row": [line.get("row") for line in lines],
            "id": [_id_text(line.get("id")) for line in lines],
        }
        for name, kind in self.carried:
            values = [_valid(line.get(name)) for line in lines]
            columns[name] = column_array(values, kind, self._encoder.value_text)
            lost = columns[name].null_count - sum(value is None for value in values)
            if lost and name not in self._misfit_columns:
                self._misfit_columns.add(name)
                logger.warning(
                    "column %r holds %s in the Parquet output (the type of the input's first "
                    "rows); %d value(s) in rows %s-%s do not fit it and are null there (the %r "
                    "column keeps every value; said once per column)",
                    name, kind, lost, lines[0].get("row"), lines[-1].get("row"), RECORD_COLUMN,
                )  # fmt: skip
        columns[RECORD_COLUMN] = [self._encoder.encode(line) for line in lines]
        for name in self.score_names:
            columns[f"{name}.score"] = [_score(line.get(name)) for line in lines]
        table = pa.Table.from_pydict(columns, schema=self.schema)
        number = self._parts_written + 1
        final = self.parts / f"part-{number:06d}.parquet"
        temporary = final.with_suffix(".tmp")
        pq.write_table(table, temporary)
        with temporary.open("rb") as handle:
            os.fsync(handle.fileno())
        os.replace(temporary, final)
        self._parts_written = number
        # Arrow's allocator keeps freed buffers for reuse; hand them back so memory stays flat.
        pa.default_memory_pool().release_unused()

    def position(self) -> dict[str, Any]:
        return {"parts": self._parts_written}

    def finish(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        temporary = self.path.with_name(self.path.name + ".tmp")
        with pq.ParquetWriter(temporary, self.schema) as combined:
            for number in range(1, self._parts_written + 1):
                part = pq.ParquetFile(
                    self.parts / f"part-{number:06d}.parquet", pre_buffer=False, buffer_size=1 << 20
                )
                for batch in part.iter_batches(batch_size=1024):
                    combined.write_batch(batch)
                pa.default_memory_pool().release_unused()
        os.replace(temporary, self.path)
        shutil.rmtree(self.parts, ignore_errors=True)

    def close(self) -> None:
        """Nothing is held open between batches."""


def _part_number(part: Path) -> int:
    try:
        return int(part.stem.removeprefix("part-"))
    except ValueError:
        return 0


def _valid(value: Any) -> Any:
    """Text fit for Arrow (lone surrogates replaced), as the record's JSON has it too."""
    if isinstance(value, str):
        return valid_text(value)
    if isinstance(value, list):
        return [valid_text(v) if isinstance(v, str) else v for v in value]
    return value


def _id_text(value: Any) -> str | None:
    return None if value is None else valid_text(str(value))


def _score(result: Any) -> float | None:
    if isinstance(result, Mapping) and isinstance(result.get("score"), int | float):
        return float(result["score"])
    return None

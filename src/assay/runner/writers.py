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
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from assay.runner.output import RECORD_COLUMN

Line = Mapping[str, Any]


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


def writer_for(path: Path, score_names: Sequence[str]) -> OutputWriter:
    """The writer for `path`'s extension (`.parquet`, else JSON Lines)."""
    if path.suffix.lower() == ".parquet":
        return ParquetWriter(path, score_names)
    return JsonlWriter(path)


def encode_line(line: Line) -> str:
    return json.dumps(line, ensure_ascii=False)


class JsonlWriter:
    """One JSON object per line, written to the output file as the run goes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._handle: BinaryIO | None = None

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
        self._handle.write("".join(encode_line(line) + "\n" for line in lines).encode("utf-8"))
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

    def __init__(self, path: Path, score_names: Sequence[str]) -> None:
        import pyarrow as pa  # imported here: pyarrow is slow to import

        self.path = path
        self.parts = path.with_name(f"{path.name}.parts")
        self.score_names = list(score_names)
        self.schema = pa.schema(
            [("row", pa.int64()), ("id", pa.string()), (RECORD_COLUMN, pa.string())]
            + [(f"{name}.score", pa.float64()) for name in self.score_names]
        )
        self._parts_written = 0

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

        columns: dict[str, list[Any]] = {
            "row": [line.get("row") for line in lines],
            "id": [None if line.get("id") is None else str(line.get("id")) for line in lines],
            RECORD_COLUMN: [encode_line(line) for line in lines],
        }
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


def _score(result: Any) -> float | None:
    if isinstance(result, Mapping) and isinstance(result.get("score"), int | float):
        return float(result["score"])
    return None

"""The Ray engine: the same run as the local engine, scored by judge actors on a Ray cluster.

The input is read as a Ray dataset (a datasource over our own streaming reader, so malformed
rows become per-row errors exactly as locally, and a resumed run starts after its checkpoint),
scored with `map_batches` by a pool of actors that each load the judge once, and streamed back
in input order to the driver, which writes output and checkpoints with the local engine's code
(`drive_run`). Output and summary are the same as the local engine's for the same input.

Ray is an optional extra: `pip install 'assay[ray]'`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import pickle
import warnings
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from assay.judges.embedded.embedding_cache import shared_cache
from assay.runner.io import Row, UnreadableRow, read_rows
from assay.runner.local import (
    ProgressCallback,
    RunControl,
    RunOptions,
    drive_run,
    score_rows,
)
from assay.runner.rows import RowScorer
from assay.runner.summary import RunSummary
from assay.runner.writers import Line
from assay.schema import RequestValidationError

INSTALL_HINT = "the Ray engine needs Ray: pip install 'assay[ray]'"


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RequestValidationError("engine", INSTALL_HINT) from None
    return ray


def _encode_row(fields: dict[str, Any] | Exception) -> str:
    """A row's fields, or why it could not be read, as one JSON text for a Ray block."""
    if isinstance(fields, RequestValidationError):
        unreadable = {"field": fields.field, "message": fields.message}
        if isinstance(fields, UnreadableRow):
            return json.dumps({"unreadable": unreadable, "fields": fields.fields}, default=str)
        return json.dumps({"unreadable": unreadable})
    if isinstance(fields, Exception):
        return json.dumps({"unreadable": {"field": "row", "message": str(fields)}})
    return json.dumps({"fields": fields}, default=str)


def _decode_row(text: str) -> dict[str, Any] | Exception:
    payload = json.loads(text)
    if "unreadable" in payload:
        field, message = payload["unreadable"]["field"], payload["unreadable"]["message"]
        if "fields" in payload:
            return UnreadableRow(field, message, payload["fields"])
        return RequestValidationError(field, message)
    fields: dict[str, Any] = payload["fields"]
    return fields


def _blocks(path: Path, skip: int, block_rows: int) -> Iterator[Any]:
    import pyarrow as pa

    rows: list[dict[str, Any]] = []
    for row, fields in read_rows(path):
        if row <= skip:
            continue
        rows.append({"row": row, "payload": _encode_row(fields)})
        if len(rows) >= block_rows:
            yield pa.Table.from_pylist(rows)
            rows = []
    if rows:
        yield pa.Table.from_pylist(rows)


def _datasource(path: Path, skip: int, block_rows: int) -> Any:
    """A one-task Ray datasource streaming `path`'s rows after row `skip`, in blocks of
    `block_rows` (one judge call each, so blocks spread over the actors)."""
    from ray.data.block import BlockMetadata
    from ray.data.datasource import Datasource, ReadTask

    class RowsDatasource(Datasource):
        def estimate_inmemory_data_size(self) -> int | None:
            return None

        def get_read_tasks(
            self, parallelism: int, per_task_row_limit: int | None = None, data_context: Any = None
        ) -> list[Any]:
            metadata = BlockMetadata(
                num_rows=None, size_bytes=None, input_files=(str(path),), exec_stats=None
            )
            return [ReadTask(lambda: _blocks(path, skip, block_rows), metadata)]

    return RowsDatasource()  # type: ignore[no-untyped-call]


class ScoringActor:
    """A Ray actor scoring batches of rows; its judge is loaded once, on the first batch."""

    def __init__(self, scorer_pickle: bytes, options: RunOptions) -> None:
        self.scorer: RowScorer = pickle.loads(scorer_pickle)
        # One call per Ray batch: Ray's own actor pool gives the parallelism.
        self.options = RunOptions(
            batch_size=options.batch_size, workers=1, row_timeout=options.row_timeout
        )
        self.loop = asyncio.new_event_loop()

    def __call__(self, batch: dict[str, Any]) -> dict[str, list[Any]]:
        rows: list[Row] = [
            (int(row), _decode_row(str(payload)))
            for row, payload in zip(batch["row"], batch["payload"], strict=True)
        ]
        before = shared_cache().stats()
        lines = self.loop.run_until_complete(score_rows(rows, self.scorer, self.options))
        cache = shared_cache().stats().since(before)
        # The batch's embedding cache counts ride on its first row, for the driver's summary.
        padding = [0] * (len(lines) - 1)
        return {
            "row": [line["row"] for line in lines],
            "line": [json.dumps(line) for line in lines],
            "cache_hits": [cache.hits, *padding][: len(lines)],
            "cache_misses": [cache.misses, *padding][: len(lines)],
        }


class CacheCounts:
    """The embedding cache hits and misses the actors reported so far."""

    def __init__(self) -> None:
        self.hits = 0
        self.misses = 0

    def totals(self) -> tuple[int, int]:
        return self.hits, self.misses


def _scored_batches(
    input_path: Path, scorer: RowScorer, options: RunOptions, skip: int, counts: CacheCounts
) -> Iterable[Sequence[Line]]:
    ray = _import_ray()
    for name in ("ray.data", "ray.data._internal.execution.streaming_executor"):
        logging.getLogger(name).setLevel(logging.WARNING)
    # Ray counts the read task's output as one input and warns that actors may idle; blocks
    # still stream to every actor, so the warning only confuses.
    warnings.filterwarnings("ignore", message="The minimum number of concurrent actors")
    context = ray.data.DataContext.get_current()
    context.execution_options.preserve_order = True
    # Our own progress bar reports rows; Ray's bars and banners would only interleave with it.
    context.enable_progress_bars = False
    context.print_on_execution_start = False
    # The reader only parses text; it takes no CPU slot, so it never waits behind the actors.
    dataset = ray.data.read_datasource(
        _datasource(input_path, skip, options.batch_size), override_num_blocks=1, num_cpus=0
    )
    scored = dataset.map_batches(
        ScoringActor,
        fn_constructor_kwargs={"scorer_pickle": pickle.dumps(scorer), "options": options},
        batch_size=options.batch_size,
        compute=ray.data.ActorPoolStrategy(size=options.workers),
        batch_format="numpy",
    )
    for batch in scored.iter_batches(batch_size=options.stream_batch_size, batch_format="numpy"):
        counts.hits += int(batch["cache_hits"].sum())
        counts.misses += int(batch["cache_misses"].sum())
        yield [json.loads(str(text)) for text in batch["line"]]


async def run_file_ray_async(
    input_path: Path,
    output_path: Path | None,
    scorer: RowScorer,
    options: RunOptions,
    *,
    address: str | None = None,
    restart: bool = False,
    on_progress: ProgressCallback | None = None,
    control: RunControl | None = None,
) -> RunSummary:
    """Like `run_file_async`, on Ray: `address` of a running cluster, or None for a local one.

    `options.workers` is the number of judge actors.
    """
    control = control or RunControl(overwrite=restart, on_progress=on_progress)
    ray = _import_ray()
    if not ray.is_initialized():
        ray.init(
            address=address,
            include_dashboard=False,
            log_to_driver=False,
            logging_level=logging.WARNING,
        )

    async def ray_batches(skip: int, advance: ProgressCallback) -> AsyncIterator[Sequence[Line]]:
        iterator = iter(_scored_batches(input_path, scorer, options, skip, counts))
        while True:
            # Ray blocks while it waits for actors; keep the event loop free meanwhile.
            lines = await asyncio.to_thread(next, iterator, None)
            if lines is None:
                return
            advance(len(lines))
            yield lines

    counts = CacheCounts()
    return await drive_run(
        input_path, output_path, scorer, options, ray_batches, control, counts.totals
    )

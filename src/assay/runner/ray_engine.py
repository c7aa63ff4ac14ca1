"""The Ray engine: the same run as the local engine, scored by judge actors on a Ray cluster.

The driver reads the input with our own streaming reader (so malformed rows become per-row
errors exactly as locally, and a resumed run starts after its checkpoint), sends it a judge
batch at a time to a pool of actors that each load the judge once (round robin, a few batches
in flight per actor, so memory stays bounded), and takes the results back in input order; it
writes output and checkpoints with the local engine's code (`drive_run`). Output and summary are
the same as the local engine's for the same input.

Plain actors, not Ray Data: a Ray dataset read from one stream merged its blocks into one, so a
single actor scored the whole input and nothing reached the output (or the checkpoint) before
the last row was scored.

Ray is an optional extra: `pip install 'assay[ray]'`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import pickle
import signal
import socket
import threading
from collections import deque
from collections.abc import AsyncIterator, Generator, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from assay._sync import in_daemon_thread
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
from assay.runner.writers import Line, as_text
from assay.schema import RequestValidationError

INSTALL_HINT = "the Ray engine needs Ray: pip install 'assay[ray]'"
#: Judge batches queued per actor: one running, one waiting, so no actor idles between calls.
IN_FLIGHT_PER_ACTOR = 2


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RequestValidationError("engine", INSTALL_HINT) from None
    return ray


def _encode_row(fields: dict[str, Any] | Exception) -> str | bytes:
    """A row's fields, pickled so that every value keeps its type (a Parquet timestamp or bytes
    reach the actor as they reach the local engine's scorer, and come out the same), or why it
    could not be read, as JSON (our exceptions do not survive pickling with their fields)."""
    if isinstance(fields, RequestValidationError):
        unreadable = {"field": fields.field, "message": fields.message}
        if isinstance(fields, UnreadableRow):
            return json.dumps({"unreadable": unreadable, "fields": fields.fields}, default=as_text)
        return json.dumps({"unreadable": unreadable})
    if isinstance(fields, Exception):
        return json.dumps({"unreadable": {"field": "row", "message": str(fields)}})
    return pickle.dumps(fields)


def _decode_row(payload: str | bytes) -> dict[str, Any] | Exception:
    if isinstance(payload, bytes):
        fields: dict[str, Any] = pickle.loads(payload)  # from this run's own driver
        return fields
    unreadable = json.loads(payload)
    field, message = unreadable["unreadable"]["field"], unreadable["unreadable"]["message"]
    if "fields" in unreadable:
        return UnreadableRow(field, message, unreadable["fields"])
    return RequestValidationError(field, message)


def _judge_batches(
    path: Path, skip: int, size: int, column_map: Iterable[tuple[str, str]]
) -> Iterator[list[tuple[int, str | bytes]]]:
    """`path`'s rows after row `skip`, encoded, in batches of `size` (one judge call each)."""
    batch: list[tuple[int, str | bytes]] = []
    for row, fields in read_rows(path, column_map):
        if row <= skip:
            continue
        batch.append((row, _encode_row(fields)))
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


class ScoringActor:
    """A Ray actor scoring batches of rows; its judge is loaded once, on the first batch."""

    def __init__(self, scorer_pickle: bytes, options: RunOptions) -> None:
        self.scorer: RowScorer = pickle.loads(scorer_pickle)
        # One call per batch: the pool of actors gives the parallelism.
        self.options = RunOptions(
            batch_size=options.batch_size, workers=1, row_timeout=options.row_timeout
        )
        self.loop = asyncio.new_event_loop()

    def score(self, batch: list[tuple[int, str | bytes]]) -> tuple[Sequence[Line], int, int]:
        """The batch's output lines, and the embedding cache hits and misses it caused."""
        rows: list[Row] = [(row, _decode_row(payload)) for row, payload in batch]
        before = shared_cache().stats()
        lines = self.loop.run_until_complete(score_rows(rows, self.scorer, self.options))
        cache = shared_cache().stats().since(before)
        return lines, cache.hits, cache.misses


class CacheCounts:
    """The embedding cache hits and misses the actors reported so far."""

    def __init__(self) -> None:
        self.hits = 0
        self.misses = 0

    def totals(self) -> tuple[int, int]:
        return self.hits, self.misses


def _scored_batches(
    input_path: Path,
    scorer: RowScorer,
    options: RunOptions,
    skip: int,
    counts: CacheCounts,
    stopped: threading.Event,
) -> Generator[Sequence[Line], None, None]:
    """Scored lines in input order, about `options.stream_batch_size` at a time.

    stopped: set when the run stops early (Ctrl-C, SIGTERM); the actors are then left to
        Ray's own shutdown, since this generator may be closed by the garbage collector at
        exit, where starting the thread `ray.kill` needs hung the process."""
    ray = _import_ray()
    # One CPU each, so that actors spread over the cluster's cores rather than share one; more
    # actors than CPUs share them (a whole CPU each, the extra actors were never placed, and
    # the run waited for their batches for ever).
    actor_class = ray.remote(num_cpus=actor_cpus(ray.cluster_resources(), options.workers))(
        ScoringActor
    )
    scorer_pickle = pickle.dumps(scorer)
    actors = [actor_class.remote(scorer_pickle, options) for _ in range(options.workers)]
    in_flight: deque[Any] = deque()
    ready: list[Line] = []

    def collect() -> None:
        lines, hits, misses = ray.get(in_flight.popleft())
        counts.hits += hits
        counts.misses += misses
        ready.extend(lines)

    try:
        for index, batch in enumerate(
            _judge_batches(input_path, skip, options.batch_size, scorer.column_map)
        ):
            in_flight.append(actors[index % len(actors)].score.remote(batch))
            if len(in_flight) >= IN_FLIGHT_PER_ACTOR * len(actors):
                collect()
            if len(ready) >= options.stream_batch_size:
                yield ready
                ready = []
        while in_flight:
            collect()
            if len(ready) >= options.stream_batch_size:
                yield ready
                ready = []
        if ready:
            yield ready
    finally:
        if not stopped.is_set():
            for actor in actors:
                ray.kill(actor)


def actor_cpus(resources: dict[str, float], workers: int) -> float:
    """CPUs to ask for each of `workers` actors: one, or an equal share of the cluster's CPUs
    when there are fewer CPUs than workers, cut to Ray's 0.0001 steps (rounded up, 3 shares
    of 2 CPUs would ask for more than 2, and the last actor would never be placed)."""
    cpus = float(resources.get("CPU", 0.0))
    if cpus <= 0 or cpus >= workers:
        return 1.0
    return max(math.floor(cpus / workers * 10_000) / 10_000, 0.0001)


#: Seconds to wait for a cluster's head to accept a connection before giving up on --address.
CONNECT_SECONDS = 5.0


def check_reachable(address: str) -> None:
    """RequestValidationError("address") unless something accepts a TCP connection at the
    head's host and port (`ray://host:port` or `host:port`; "auto" and other forms are left to
    Ray): joining a cluster that is not there timed out after 30 s, or retried for ever."""
    target = address.removeprefix("ray://")
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        return
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_SECONDS):
            pass
    except (OSError, ValueError, OverflowError) as error:
        reason = getattr(error, "strerror", None) or str(error) or type(error).__name__
        raise RequestValidationError(
            "address", f"nothing answers at {address} ({reason}); is the Ray cluster running?"
        ) from None


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
        # A local cluster is this run's own; its token authentication stays on, unannounced.
        logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(
            logging.ERROR
        )
        if address is not None:
            check_reachable(address)
        # Ray's core worker installs its own SIGTERM handler (a stack dump and an abort): keep
        # ours, so that a stopped run says where it stopped and exits 130, as without Ray.
        ours = signal.getsignal(signal.SIGTERM)
        try:
            ray.init(
                address=address,
                include_dashboard=False,
                log_to_driver=False,
                logging_level=logging.WARNING,
            )
        except ConnectionError as error:
            raise RequestValidationError("address", f"cannot join {address}: {error}") from None
        if threading.current_thread() is threading.main_thread() and ours is not None:
            signal.signal(signal.SIGTERM, ours)

    async def ray_batches(skip: int, advance: ProgressCallback) -> AsyncIterator[Sequence[Line]]:
        stopped = threading.Event()
        iterator = _scored_batches(input_path, scorer, options, skip, counts, stopped)
        finished = False
        try:
            while True:
                # Ray blocks while it waits for actors; keep the event loop free meanwhile, in
                # a thread nothing joins: after Ctrl-C or SIGTERM, asyncio.run's to_thread pool
                # would wait for a Ray wait that never ends.
                lines = await in_daemon_thread(next, iterator, None)
                if lines is None:
                    finished = True
                    return
                advance(len(lines))
                yield lines
        finally:
            if not finished:  # stopped early
                stopped.set()
                with contextlib.suppress(ValueError):  # still waiting in its thread
                    iterator.close()

    counts = CacheCounts()
    return await drive_run(
        input_path, output_path, scorer, options, ray_batches, control, counts.totals
    )

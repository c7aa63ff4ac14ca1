"""Publish a finished run's results to an Assay server (`assay run --publish`), resumably.

Once the output file is complete, its lines are sent in batches to the server's
`POST /v1/applications/{name}/detections`, each row under a key made of the run's id and the
row number. After every batch the checkpoint records how many rows were sent, so a run
interrupted while publishing continues from there when started again; a batch sent twice (its
answer lost, or the run killed before the checkpoint was saved) is recognised by the server by
those keys and stored once. Rows that were not scored (rejected, or with no detector result)
are not sent.

How a batch reaches the server is the caller's: anything with `send` (the CLI wires the
client's `detections.publish`), so this module knows nothing of HTTP.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from assay.detectors import DETECTORS
from assay.runner.checkpoint import Checkpoint
from assay.runner.output import iter_output_lines
from assay.runner.rows import TEXT_FIELDS
from assay.schema import AssayError
from assay.transport import PayloadTooLargeError

#: Rows per publish request (the server's default limit per request is 100 items).
PUBLISH_BATCH_SIZE = 100


class Publisher(Protocol):
    """Where and how a run's results are sent."""

    @property
    def target(self) -> Mapping[str, str]:
        """Server, application and model: part of the run's fingerprint, so a resumed run
        cannot send half its rows to one place and half to another."""

    async def check(self) -> None:
        """Called before any row is scored: raise when the server would refuse the results
        (a key it does not accept), so the run stops before the scoring is spent."""

    async def send(self, run_id: str, items: Sequence[Mapping[str, Any]]) -> None:
        """Store one batch of items on the server; raise when it could not."""


class PublishFailed(AssayError):
    """Sending a batch failed (after the sender's own retries). What was sent before stays
    sent, and the checkpoint says so: the same command run again continues from there."""


@dataclass
class PublishCounts:
    """What publishing did: items sent now, the output row an interrupted publish had reached
    (0 for a fresh start), and rows left out with why."""

    sent: int = 0
    resumed_after_row: int = 0
    skipped: int = 0
    skipped_reasons: dict[str, int] = field(default_factory=dict)


def publish_item(line: Mapping[str, Any]) -> dict[str, Any] | None:
    """The item sent for one output line, or None when it has nothing to publish.

    The item holds the row's key (its row number), the scored text and each detector's result
    or error object. Metric results are not sent: the dashboard shows detectors.
    """
    if isinstance(line.get("error"), Mapping):
        return None
    results = {
        name: value
        for name, value in line.items()
        if name in DETECTORS and isinstance(value, Mapping)
    }
    if not results or not isinstance(line.get("generated_text"), str):
        return None
    item: dict[str, Any] = {"key": str(line["row"])}
    item.update({name: line[name] for name in TEXT_FIELDS if line.get(name) is not None})
    item["results"] = results
    return item


def _batches(
    lines: Iterable[Mapping[str, Any]], after_row: int, size: int, counts: PublishCounts
) -> Iterable[tuple[int, list[dict[str, Any]]]]:
    """(last row number covered, items) per batch of at most `size` items."""
    batch: list[dict[str, Any]] = []
    last = after_row
    for line in lines:
        row = int(line["row"])
        if row <= after_row:
            continue
        last = row
        item = publish_item(line)
        if item is None:
            counts.skipped += 1
            reason = "rejected" if isinstance(line.get("error"), Mapping) else "no detector result"
            counts.skipped_reasons[reason] = counts.skipped_reasons.get(reason, 0) + 1
            continue
        batch.append(item)
        if len(batch) >= size:
            yield last, batch
            batch = []
    if batch or last > after_row:
        yield last, batch


async def publish_output(
    output_path: Path,
    checkpoint: Checkpoint,
    save: Callable[[Checkpoint], None],
    publisher: Publisher,
    on_progress: Callable[[int], None] | None = None,
    batch_size: int = PUBLISH_BATCH_SIZE,
) -> PublishCounts:
    """Send the output's rows after `checkpoint.rows_published`, a batch at a time.

    save: stores the checkpoint after each batch (so a rerun continues after it).
    on_progress: called with the number of output rows handled so far (sent or skipped).
    """
    counts = PublishCounts(resumed_after_row=checkpoint.rows_published)
    lines = iter_output_lines(output_path)
    for last_row, items in _batches(lines, checkpoint.rows_published, batch_size, counts):
        if items:
            try:
                await publisher.send(checkpoint.run_id, items)
            except Exception as error:
                where = (
                    f"after output row {checkpoint.rows_published} ({counts.sent} rows sent "
                    "this time)"
                    if checkpoint.rows_published
                    else "before any row was sent"
                )
                again = "run the same command again to continue from there"
                if isinstance(error, PayloadTooLargeError):  # sent again, it fails again
                    again = (
                        f"run the same command again with --publish-batch-size below "
                        f"{len(items)} (or the server's limit) to continue from there"
                    )
                raise PublishFailed(f"publishing stopped {where}: {error}; {again}") from error
            counts.sent += len(items)
        checkpoint.rows_published = last_row
        save(checkpoint)
        if on_progress is not None:
            on_progress(last_row)
    return counts


#: An awaitable sender of one batch, for `CallbackPublisher`.
SendBatch = Callable[[str, Sequence[Mapping[str, Any]]], Awaitable[None]]


@dataclass
class CallbackPublisher:
    """A `Publisher` made of a target description and a function that sends one batch."""

    target: Mapping[str, str]
    sender: SendBatch

    async def check(self) -> None:
        """Nothing to check: the sender says what goes wrong when it sends."""

    async def send(self, run_id: str, items: Sequence[Mapping[str, Any]]) -> None:
        await self.sender(run_id, items)

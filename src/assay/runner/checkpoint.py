"""Checkpoints: how far a run got, so the same command started again continues from there.

After each stream batch the runner makes its output durable (flush + fsync) and then replaces
`<output>.checkpoint.json` atomically (write a temporary file, fsync, rename). A run killed at any
instant therefore leaves a checkpoint that describes output that is really on disk; output
written after the last checkpoint is cut off on resume and those rows are scored again, so no row
is lost and none appears twice.

The checkpoint carries a fingerprint of the input file and of every option that changes what the
output holds, so a resumed run cannot silently mix two different runs.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from assay.schema import RequestValidationError

#: Bump when the checkpoint's meaning changes; older checkpoints are then refused, not misread.
#: 2: the fingerprint hashes the whole input, not only its first and last MiB.
#: 3: output lines carry the scored text; publishing state (run id, rows published).
CHECKPOINT_VERSION = 3
#: Bytes read at a time while hashing the input.
_HASH_CHUNK_BYTES = 1 << 20


def checkpoint_path_for(output_path: Path) -> Path:
    """`<output>.checkpoint.json` next to the output."""
    return output_path.with_name(f"{output_path.name}.checkpoint.json")


def fingerprint(input_path: Path, options: dict[str, Any]) -> str:
    """A hash of the whole input file and of the run's options.

    Every byte counts: an edit anywhere in the input, even in the middle of a large file, makes
    a resume refuse to mix the old run's lines with the new input's. The file is read in
    chunks, so memory stays flat.
    """
    digest = hashlib.sha256()
    with input_path.open("rb") as handle:
        while chunk := handle.read(_HASH_CHUNK_BYTES):
            digest.update(chunk)
    digest.update(json.dumps(options, sort_keys=True, default=str).encode())
    return digest.hexdigest()


@dataclass
class Checkpoint:
    """Where a run stands.

    fingerprint: see `fingerprint`; a resume with another one is refused.
    rows_done: input rows (counted from the first) whose output lines are durable.
    position: the writer's own record of what is durable (bytes for JSONL, parts for Parquet).
    finished: the output file is complete; only publishing (if asked for) is left.
    run_id: this run's id, chosen when it started and kept across resumes, so that results
        published again after an interruption are recognised rather than stored twice.
    rows_published: output rows (counted from the first) already sent to the server.
    publish_target: where the run publishes (server, application, model), when it does: kept
        in clear so that a target corrected before anything was sent can be told apart from
        another run (`runner.local.resume_checkpoint`).
    """

    fingerprint: str
    rows_done: int = 0
    position: dict[str, Any] = field(default_factory=dict)
    version: int = CHECKPOINT_VERSION
    finished: bool = False
    run_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    rows_published: int = 0
    publish_target: dict[str, str] | None = None


def read_checkpoint(path: Path) -> Checkpoint | None:
    """The checkpoint at `path` as it is, or None if there is none; RequestValidationError
    (field "out") when it cannot be read."""
    if not path.exists():
        return None
    try:
        return Checkpoint(**json.loads(path.read_text(encoding="utf-8")))
    except (json.JSONDecodeError, TypeError) as error:
        raise RequestValidationError(
            "out", f"checkpoint {path} is unreadable ({error}); pass --overwrite to start over"
        ) from None


def load_checkpoint(path: Path, expected_fingerprint: str) -> Checkpoint | None:
    """The checkpoint at `path`, or None if there is none.

    Raises RequestValidationError (field "out") when it belongs to a different input or options,
    saying how to start over.
    """
    checkpoint = read_checkpoint(path)
    if checkpoint is None:
        return None
    if checkpoint.version != CHECKPOINT_VERSION or checkpoint.fingerprint != expected_fingerprint:
        raise RequestValidationError(
            "out",
            f"an unfinished run with a different input or options left {path}; rerun that exact "
            "command to finish it, or pass --overwrite to start over",
        )
    return checkpoint


def save_checkpoint(path: Path, checkpoint: Checkpoint) -> None:
    """Replace the checkpoint atomically and durably."""
    temporary = path.with_name(path.name + ".tmp")
    with temporary.open("w", encoding="utf-8") as handle:
        json.dump(asdict(checkpoint), handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
    _fsync_directory(path.parent)


def remove_checkpoint(path: Path) -> None:
    path.unlink(missing_ok=True)
    path.with_name(path.name + ".tmp").unlink(missing_ok=True)


def _fsync_directory(directory: Path) -> None:
    """Make a rename in `directory` durable (a no-op where directories cannot be opened)."""
    try:
        descriptor = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)

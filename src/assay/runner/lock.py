"""One run at a time per output file.

Two `assay run` commands given the same `--out` (a job started twice, a retry while the first
still runs) would both "resume" it, score the same rows twice (an LLM judge's calls paid twice)
and trip over each other's checkpoint. A run holds an exclusive lock on `<out>.lock` while it
writes; a second one is refused at once, naming the file. The lock is the operating system's
(`flock`), so a killed run leaves no stale lock: the file may stay, the lock does not.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from assay.schema import RequestValidationError

try:
    import fcntl
except ImportError:  # Windows: no flock; runs are not guarded there
    fcntl = None  # type: ignore[assignment]


def lock_path_for(output_path: Path) -> Path:
    return output_path.with_name(output_path.name + ".lock")


@contextlib.contextmanager
def output_lock(output_path: Path) -> Iterator[None]:
    """Hold the lock of `output_path` for the block; RequestValidationError("out") when another
    process holds it."""
    if fcntl is None:
        yield
        return
    path = lock_path_for(output_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RequestValidationError(
                "out",
                f"another assay run is writing {output_path} (it holds {path.name}); wait for "
                "it to finish or stop it, then run this command again",
            ) from None
        try:
            yield
        finally:
            # Removed while still held, so no run that starts later finds it; the lock goes
            # with the handle.
            path.unlink(missing_ok=True)

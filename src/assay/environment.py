"""Settings every command reads from the environment, parsed in one place.

`check_environment()` reads them all when a command starts, so a bad value stops it at once with
the variable named (exit 2), instead of failing every row later. Kept free of heavy imports: the
CLI calls it before any command runs.
"""

from __future__ import annotations

import math
import os

from assay.schema import RequestValidationError

THREADS_ENV = "ASSAY_THREADS"
CACHE_MB_ENV = "ASSAY_EMBEDDING_CACHE_MB"
JUDGE_ENV = "ASSAY_JUDGE"
#: The embedding cache's default bound.
DEFAULT_CACHE_MB = 64.0


def thread_count() -> int:
    """How many ONNX runs go side by side (`$ASSAY_THREADS`, default min(cores, 4))."""
    raw = os.environ.get(THREADS_ENV, "").strip()
    if not raw:
        return min(os.cpu_count() or 1, 4)
    if not raw.isdigit() or int(raw) < 1:
        raise RequestValidationError(f"${THREADS_ENV}", f"must be a whole number >= 1, got {raw!r}")
    return int(raw)


def cache_megabytes() -> float:
    """The embedding cache's bound in MiB (`$ASSAY_EMBEDDING_CACHE_MB`, default 64; 0 is off)."""
    raw = os.environ.get(CACHE_MB_ENV, "").strip()
    try:
        megabytes = float(raw) if raw else DEFAULT_CACHE_MB
    except ValueError:
        megabytes = math.nan
    if not math.isfinite(megabytes) or megabytes < 0:
        raise RequestValidationError(
            f"${CACHE_MB_ENV}", f"must be a number of MiB >= 0 (0 turns the cache off), got {raw!r}"
        )
    return megabytes


def default_judge_name() -> str:
    """The judge for detectors whose config names none (`$ASSAY_JUDGE`, default "embedded")."""
    return os.environ.get(JUDGE_ENV, "").strip() or "embedded"


def check_environment() -> None:
    """Raise RequestValidationError naming the first variable whose value cannot work."""
    from assay.judges import judge_names

    thread_count()
    cache_megabytes()
    judge = default_judge_name()
    if judge not in judge_names():
        raise RequestValidationError(
            f"${JUDGE_ENV}", f"unknown judge {judge!r}; known judges: {', '.join(judge_names())}"
        )

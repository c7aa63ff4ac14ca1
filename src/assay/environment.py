"""Settings every command reads from the environment, parsed in one place.

The CLI reads them all when a command starts (`assay.cli.check_environment`), so a bad value stops
it at once with the variable named (exit 2), instead of failing every row later. Imports nothing
of Assay's judges: the embedded judge reads its thread count and cache bound from here.
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

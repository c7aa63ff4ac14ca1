"""Score datasets: read rows, batch them through the detectors, write results and a summary.

`run_file` is the local engine's entry point; `io` reads and writes rows, `summary` rolls output
lines up into per-detector numbers.
"""

from __future__ import annotations

from assay.runner.io import RowWriter, count_rows, read_rows
from assay.runner.local import (
    DEFAULT_BATCH_SIZE,
    applicable_detectors,
    build_request,
    default_output_path,
    run_file,
    run_file_async,
    summary_path_for,
)
from assay.runner.summary import PASS_THRESHOLD, DetectorSummary, RunSummary

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "PASS_THRESHOLD",
    "DetectorSummary",
    "RowWriter",
    "RunSummary",
    "applicable_detectors",
    "build_request",
    "count_rows",
    "default_output_path",
    "read_rows",
    "run_file",
    "run_file_async",
    "summary_path_for",
]

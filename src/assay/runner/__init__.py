"""Score datasets: read rows, batch them through the detectors, write results and a summary.

`run_file` is the local engine's entry point (`local.py`); `io` reads rows, `writers` writes
output durably, `checkpoint` makes runs resumable, `rows` turns rows into request items and
results into output lines, `summary` rolls output lines up, `retry` rescores failed rows.
"""

from __future__ import annotations

from assay.runner.io import count_rows, read_rows
from assay.runner.local import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_STREAM_BATCH_SIZE,
    RunOptions,
    default_output_path,
    run_file,
    run_file_async,
)
from assay.runner.output import iter_output_lines, summary_path_for
from assay.runner.rows import DetectorScorer, RowScorer, applicable_detectors, build_request
from assay.runner.summary import PASS_THRESHOLD, DetectorSummary, RunSummary

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_STREAM_BATCH_SIZE",
    "PASS_THRESHOLD",
    "DetectorScorer",
    "DetectorSummary",
    "RowScorer",
    "RunOptions",
    "RunSummary",
    "applicable_detectors",
    "build_request",
    "count_rows",
    "default_output_path",
    "iter_output_lines",
    "read_rows",
    "run_file",
    "run_file_async",
    "summary_path_for",
]

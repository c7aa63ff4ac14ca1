"""Speed of each detector on the embedded judge, on this machine.

Two numbers per detector:
- throughput: rows/s when rows go through `detect_items` in batches (how `assay run` works);
- latency: p50/p95 of one request of one item at a time (how a server call or `Client` works).
Rows come from the dev data (real answer lengths): haluquestqa answers for output_relevance,
ragchecker answers with their reference as context for completeness. The embedding cache is off:
the rows repeat (ragchecker has each pair once per annotator, and latency reruns the throughput
rows), so a cache would time its own hits; what it saves is measured by `bench/server.py`.

    python bench/speed.py [--rows N] [--batch B]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

import numpy as np

import common
from assay.detectors.evaluate import detect_items, parse_item
from assay.judges import get_judge
from assay.judges.embedded.embedding_cache import CACHE_MB_ENV
from assay.schema import DetectRequestItem


def items(
    detector: str, rows: list[tuple[str | None, str, tuple[str, ...]]]
) -> list[DetectRequestItem]:
    return [
        parse_item(
            {
                "user_query": q,
                "generated_text": r,
                "context": list(c) or None,
                "config": {detector: {"detector_name": "default"}},
            }
        )
        for q, r, c in rows
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=200)
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()
    os.environ[CACHE_MB_ENV] = "0"
    get_judge("embedded")  # load the model before timing
    workloads = {
        "output_relevance": [
            (r["query"], r["response"], ()) for r in common.relevance_rows()[: args.rows]
        ],
        "completeness": [
            (p["query"], p["a"], p["context"]) for p in common.pairwise_rows()[: args.rows]
        ],
    }
    lines = [
        f"| detector | rows | mean words/response | throughput, batches of {args.batch} (rows/s) | latency p50 (ms) | latency p95 (ms) |",
        "|---|---|---|---|---|---|",
    ]
    for detector, rows in workloads.items():
        batch_items = items(detector, rows)
        asyncio.run(detect_items(batch_items[:4]))  # warm-up
        start = time.perf_counter()
        for i in range(0, len(batch_items), args.batch):
            asyncio.run(detect_items(batch_items[i : i + args.batch]))
        throughput = len(batch_items) / (time.perf_counter() - start)
        latencies = []
        for item in batch_items:
            t0 = time.perf_counter()
            asyncio.run(detect_items([item]))
            latencies.append((time.perf_counter() - t0) * 1000)
        p50, p95 = np.percentile(latencies, [50, 95])
        words = np.mean([len(r.split()) for _, r, _ in rows])
        lines.append(
            f"| {detector} | {len(rows)} | {words:.0f} | {throughput:.1f} | {p50:.0f} | {p95:.0f} |"
        )
    text = "\n".join(lines)
    print(text)
    common.write_section(
        "Speed (embedded judge)",
        f"`python bench/speed.py` on this machine ({common.machine()}, CPU only, onnxruntime threads = "
        f"ASSAY_THREADS or min(cores, 4); embedding cache off).\n\n" + text,
    )


if __name__ == "__main__":
    main()

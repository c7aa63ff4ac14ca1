"""Throughput and latency of `POST /v2/detect` on a real `assay serve` subprocess.

Single-item output_relevance bodies (haluquestqa queries and answers, so texts have real
lengths) are posted by 1, 8 and 32 concurrent clients; each level runs for a fixed number of
requests after a warm-up. The server keeps its defaults (SQLite file, micro-batching on) but
for the embedding cache, which is off: the levels post the same bodies.
Two more cases: the embedding cache on and off (`server_cache.py`) and replicas sharing one
PostgreSQL database (`server_replicas.py`); each writes its own section of RESULTS.md.

    python bench/server.py [--requests N] [--levels 1,8,32] [--cases levels,cache,replicas]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import common
import server_cache
import server_replicas
from assay.detectors.evaluate import detect_items, parse_item
from assay.judges.embedded.embedding_cache import CACHE_MB_ENV
from assay.server.process import ServerProcess

API_KEY = "bench-key"


def bodies(limit: int) -> list[list[dict[str, Any]]]:
    return [
        [
            {
                "user_query": row["query"],
                "generated_text": row["response"],
                "config": {"output_relevance": {"detector_name": "default"}},
            }
        ]
        for row in common.relevance_rows()[:limit]
    ]


def in_process_rate(payloads: list[list[dict[str, Any]]], count: int = 40) -> float:
    """Items/s scoring one item per call in this process: the machine's speed right now, to
    read the server's figures against (the machine is shared, so its speed varies)."""
    items = [parse_item(body[0]) for body in payloads[:count]]
    asyncio.run(detect_items(items[:2]))  # load the model first
    started = time.perf_counter()
    for item in items:
        asyncio.run(detect_items([item]))
    return len(items) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=200, help="requests per concurrency level")
    parser.add_argument("--levels", default="1,8,32", help="comma-separated client counts")
    parser.add_argument("--cases", default="levels,cache,replicas", help="which cases to run")
    parser.add_argument("--questions", type=int, default=24, help="cache case: questions")
    parser.add_argument("--jobs", type=int, default=300, help="replica case: async jobs")
    args = parser.parse_args()
    cases = set(args.cases.split(","))
    if "levels" in cases:
        concurrency_levels(args)
    if "cache" in cases:
        cache_case(args)
    if "replicas" in cases:
        replica_case(args)


def cache_case(args: argparse.Namespace) -> None:
    workloads = {
        f"RAG, {server_cache.ANSWERS_PER_QUESTION} answers per question": (
            server_cache.five_answer_bodies(args.questions)
        ),
        "no repeats": server_cache.no_repeat_bodies(
            args.questions * server_cache.ANSWERS_PER_QUESTION
        ),
    }
    text = server_cache.table(server_cache.measure(API_KEY, workloads, clients=8))
    costs = server_cache.cost_table(server_cache.row_costs(next(iter(workloads.values()))))
    print(text + "\n\n" + costs)
    common.write_section(
        "Server: embedding cache",
        f"`python bench/server.py --cases cache --questions {args.questions}` on this machine "
        f"({common.machine()}, shared with other work): ragchecker questions with their "
        "reference as context, both detectors, one item per request from 8 concurrent clients, "
        "against a fresh `assay serve` (SQLite) with `ASSAY_EMBEDDING_CACHE_MB=0` (off) or the "
        "default 64 MiB (on), after the same 8-row warm-up (haluquestqa rows, sharing no text). In the RAG workload each question "
        "has its own two answers and three from other rows, each text used once, sent system "
        "by system: only the question and the context repeat. Ratios are from one run.\n\n"
        + text
        + "\n\nWhere a row's time goes (the RAG workload in this process, rows judged one at a "
        "time, without the server's micro-batching): what the cache leaves is each answer's "
        "own work: encoding its sentences, and the agreement model reading its sentence pairs "
        "(each pair holds one answer's sentence, so no cache can save it).\n\n" + costs,
    )


def replica_case(args: argparse.Namespace) -> None:
    text = server_replicas.table(server_replicas.measure(API_KEY, args.jobs))
    print(text)
    common.write_section(
        "Server: replicas",
        f"`python bench/server.py --cases replicas --jobs {args.jobs}` on this machine "
        f"({common.machine()}, shared with other work): {args.jobs} async output_relevance "
        "jobs (haluquestqa texts) submitted 50 per request, spread over the replicas, timed "
        "until every job is done. PostgreSQL is a throwaway local cluster. On 2 cores the "
        "replicas share the same CPU: the point is the overhead of PostgreSQL and of the shared "
        "queue, and that each job is stored exactly once (detections = distinct jobs = jobs). "
        "Ratios are from one run.\n\n" + text,
    )


def concurrency_levels(args: argparse.Namespace) -> None:
    levels = [int(value) for value in args.levels.split(",")]
    payloads = bodies(400)
    # Cache off, here and in the server: every level posts the same bodies from the start, so a
    # cache would time its own hits (the cache case measures what it saves). Only for this case:
    # later cases start servers that inherit this process's environment.
    saved = os.environ.get(CACHE_MB_ENV)
    os.environ[CACHE_MB_ENV] = "0"
    try:
        baseline = in_process_rate(payloads)
    finally:
        if saved is None:
            del os.environ[CACHE_MB_ENV]
        else:
            os.environ[CACHE_MB_ENV] = saved
    with tempfile.TemporaryDirectory() as folder:
        server = ServerProcess(
            f"sqlite:///{Path(folder) / 'bench.db'}",
            Path(folder) / "server.log",
            api_keys=[API_KEY],
            environment={CACHE_MB_ENV: "0"},
        )
        with server:

            def level(clients: int, total: int) -> dict[str, float]:
                return asyncio.run(
                    common.post_detect(server.url, API_KEY, payloads, clients, total)
                )

            level(4, 20)  # warm-up: connections, caches
            rows = [(clients, level(clients, args.requests)) for clients in levels]
    lines = [
        "| concurrent clients | requests | req/s | p50 latency (ms) | p99 latency (ms) | errors |",
        "|---|---|---|---|---|---|",
    ]
    for clients, numbers in rows:
        lines.append(
            f"| {clients} | {numbers['requests']:.0f} | {numbers['rps']:.1f} | {numbers['p50']:.0f} | "
            f"{numbers['p99']:.0f} | {numbers['errors']:.0f} |"
        )
    text = "\n".join(lines)
    text += (
        f"\n\nSame run, in-process baseline (one item per `detect_items` call, no HTTP, no "
        f"batching across calls): {baseline:.1f} items/s."
    )
    print(text)
    common.write_section(
        "Server /v2/detect (assay serve)",
        f"`python bench/server.py --cases levels --requests {args.requests}` on this machine ({common.machine()}, "
        "CPU only, shared with other work): single-item output_relevance bodies with haluquestqa "
        "queries and answers, against an `assay serve` subprocess on loopback (SQLite file, "
        "micro-batching on, auth on, embedding cache off: every level posts the same bodies). "
        "Latency is measured at the client.\n\n" + text,
    )


if __name__ == "__main__":
    main()

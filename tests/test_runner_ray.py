"""The Ray engine on a local Ray instance scores like the local engine, and says how to get Ray
when it is missing."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from assay.runner import RunOptions, iter_output_lines, run_file
from assay.runner.checkpoint import checkpoint_path_for
from assay.runner.io import UnreadableRow
from assay.runner.ray_engine import INSTALL_HINT, _decode_row, _encode_row, run_file_ray_async
from assay.runner.rows import DetectorScorer
from assay.schema import RequestValidationError
from test_runner_resume import interrupt_part_way

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "rag_rows.jsonl"
ASSAY_BIN = Path(sys.executable).with_name("assay")


def test_an_unreadable_row_keeps_its_columns_on_the_way_to_the_actors() -> None:
    bad = UnreadableRow("generated_text", "is not valid UTF-8 text", {"id": "b\udcff"})
    decoded = _decode_row(_encode_row(bad))
    assert isinstance(decoded, UnreadableRow)
    assert (decoded.field, decoded.message, decoded.fields) == (
        "generated_text",
        "is not valid UTF-8 text",
        {"id": "b\udcff"},
    )


def test_a_row_s_values_keep_their_types_on_the_way_to_the_actors() -> None:
    # Sent as JSON with str() for what JSON lacks, a Parquet timestamp came out
    # "2024-01-01 00:00:00" (locally "2024-01-01T00:00:00") and bytes as "b'\\x00\\xff'".
    import datetime
    from decimal import Decimal

    row = {
        "generated_text": "Paris.",
        "ts": datetime.datetime(2024, 1, 1),
        "blob": b"\x00\xff",
        "price": Decimal("2.50"),
    }
    assert _decode_row(_encode_row(row)) == row


def test_ray_engine_gives_the_local_engines_records_and_summary(tmp_path: Path) -> None:
    data = tmp_path / "rows.jsonl"
    # The example rows plus one malformed line: per-row errors must survive the trip through Ray.
    data.write_text(EXAMPLES.read_text() + "{not json\n", encoding="utf-8")
    local_out, ray_out = tmp_path / "local.parquet", tmp_path / "ray.parquet"
    # Explanations on in both, as `assay run` has them by default.
    local = run_file(data, local_out, explain=True, options=RunOptions(batch_size=4))

    result = subprocess.run(
        [
            str(ASSAY_BIN),
            "run",
            str(data),
            "--engine",
            "ray",
            "--workers",
            "2",
            "--batch-size",
            "4",
            "--stream-batch-size",
            "8",
            "--out",
            str(ray_out),
            "--allow-errors",  # the unusable row is expected
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )

    assert result.returncode == 0, result.stderr[-3000:]
    ray_lines = list(iter_output_lines(ray_out))
    assert ray_lines == list(iter_output_lines(local_out))
    assert ray_lines[-1]["error"]["kind"] == "invalid_row"
    assert local.rows == 21 and local.rows_failed == 1
    assert "mean score" in result.stdout  # the same terminal summary as a local run
    # The actors' embedding cache counts reach the driver's summary.
    written = json.loads(ray_out.with_name("ray.parquet.summary.json").read_text())
    cache = written["embedding_cache"]
    assert cache["hits"] + cache["misses"] > 0 and cache["hit_rate"] is not None


async def test_missing_ray_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # makes `import ray` fail
    with pytest.raises(RequestValidationError) as raised:
        await run_file_ray_async(EXAMPLES, tmp_path / "out.jsonl", DetectorScorer(), RunOptions())
    assert raised.value.field == "engine"
    assert raised.value.message == INSTALL_HINT
    assert "assay[ray]" in INSTALL_HINT


async def test_ray_results_are_written_while_the_input_is_still_being_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A Ray dataset read from one stream once merged every row into one block: one actor scored
    # everything and nothing was written (or checkpointed) before the last row. The driver now
    # reads a few judge batches ahead of what is written, and no more.
    from assay.runner import ray_engine

    rows = [json.loads(line) for line in EXAMPLES.read_text().splitlines()][:10] * 6
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    read = 0
    real_read_rows = ray_engine.read_rows

    def counting_read_rows(path: Path, column_map: Any = None):  # type: ignore[no-untyped-def]
        nonlocal read
        for item in real_read_rows(path, column_map):
            read += 1
            yield item

    monkeypatch.setattr(ray_engine, "read_rows", counting_read_rows)
    read_at_progress: list[int] = []
    options = RunOptions(batch_size=4, workers=2, stream_batch_size=4)

    def on_progress(done: int) -> None:
        if done:
            read_at_progress.append(read)

    summary = await run_file_ray_async(
        data, tmp_path / "out.jsonl", DetectorScorer(), options, on_progress=on_progress
    )
    assert summary.rows == 60
    # Two actors, two batches of 4 queued each: at most 16 rows in flight, plus the one read next.
    assert read_at_progress and 0 < read_at_progress[0] <= 4 * 4 + 4 < 60
    assert len(list(iter_output_lines(tmp_path / "out.jsonl"))) == 60


def test_an_address_where_nothing_answers_is_named_before_ray_starts(tmp_path: Path) -> None:
    # It waited 30 s for a ray:// address, and retried for ever for host:port.
    data = tmp_path / "rows.jsonl"
    data.write_text(EXAMPLES.read_text(), encoding="utf-8")
    with socket.socket() as probe:  # a port that was free a moment ago
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    for address in (f"ray://127.0.0.1:{port}", f"127.0.0.1:{port}"):
        result = subprocess.run(
            [str(ASSAY_BIN), "run", str(data), "--engine", "ray", "--address", address],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 2, result.stderr[-2000:]
        assert f"error: --address: nothing answers at {address}" in result.stderr


def test_sigterm_stops_a_ray_run_as_ctrl_c_does(tmp_path: Path) -> None:
    # Ray's own SIGTERM handler dumped a stack and aborted (exit 134) without the resume line.
    rows = [json.loads(text) for text in EXAMPLES.read_text().splitlines()]
    data = tmp_path / "rows.jsonl"
    with data.open("w", encoding="utf-8") as handle:
        for copy in range(12):
            for row in rows:
                row = {**row, "generated_text": f"{row['generated_text']} (copy {copy})"}
                handle.write(json.dumps(row) + "\n")
    out = tmp_path / "out.jsonl"
    command = [str(ASSAY_BIN), "run", str(data), "--out", str(out), "--engine", "ray"]
    command += ["--workers", "1", "--batch-size", "4", "--stream-batch-size", "4"]

    code, stderr = interrupt_part_way(
        command, dict(os.environ), checkpoint_path_for(out), 4, signal.SIGTERM
    )

    assert code == 130, stderr[-3000:]
    assert "run the same command again to resume from row" in " ".join(stderr.split())


def test_more_workers_than_the_clusters_cpus_share_them() -> None:
    from assay.runner.ray_engine import actor_cpus

    assert actor_cpus({"CPU": 8.0}, 4) == 1.0
    assert actor_cpus({"CPU": 2.0}, 4) == 0.5
    # Never more than the cluster has in all, in Ray's 0.0001 steps.
    assert actor_cpus({"CPU": 2.0}, 3) == 0.6666 and 3 * 0.6666 <= 2
    assert actor_cpus({}, 3) == 1.0  # nothing reported: Ray's own default


async def test_a_run_with_more_workers_than_cpus_finishes(tmp_path: Path) -> None:
    # Each actor asked for a whole CPU: the ones beyond the cluster's CPUs were never placed
    # and the run waited for their batches for ever (the README's --workers 4 on 2 cores).
    data = tmp_path / "rows.jsonl"
    data.write_text(EXAMPLES.read_text(), encoding="utf-8")
    workers = (os.cpu_count() or 1) + 2
    options = RunOptions(batch_size=2, workers=workers, stream_batch_size=4)
    summary = await asyncio.wait_for(
        run_file_ray_async(data, tmp_path / "out.jsonl", DetectorScorer(), options), 600
    )
    rows = len(EXAMPLES.read_text().splitlines())
    assert summary.rows == rows
    assert len(list(iter_output_lines(tmp_path / "out.jsonl"))) == rows

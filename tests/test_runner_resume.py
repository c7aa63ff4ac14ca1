"""Runs that stop part-way: a killed `assay run` resumes to the same output an uninterrupted run
writes; failed rows can be retried alone; rows past their timeout are errors, not hangs."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from assay.judges import Judge, Question, Verdict, register_judge
from assay.runner import RunOptions, iter_output_lines, run_file
from assay.runner.checkpoint import checkpoint_path_for
from assay.runner.local import (
    RunControl,
    finished_fingerprint,
    run_fingerprint,
    summary_path_for,
)
from assay.runner.retry import retry_failed_async
from assay.runner.rows import DetectorScorer
from assay.schema import JudgeFailure, RequestValidationError
from conftest import start_interruptible

HERE = Path(__file__).resolve().parent
ASSAY_BIN = Path(sys.executable).with_name("assay")
WITH_TEST_JUDGES = [sys.executable, str(HERE / "assay_with_test_judges.py")]

TOPICS = ["boiling eggs", "the office VPN", "renewing a passport", "watering tomatoes"]


def make_rows(count: int) -> list[dict[str, Any]]:
    rows = []
    for n in range(count):
        topic = TOPICS[n % len(TOPICS)]
        rows.append(
            {
                "id": f"r{n}",
                "user_query": f"How do I deal with {topic}? (case {n})",
                "context": [f"Guide {n}: the usual advice for {topic} is to follow step {n % 5}."],
                "generated_text": f"For {topic}, follow step {n % 5} of the guide" + "." * (n % 3),
            }
        )
    return rows


def write_jsonl(path: Path, rows: Sequence[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def wait_for_progress(checkpoint: Path, process: subprocess.Popen[bytes], rows: int) -> None:
    """Wait (bounded) until the run's checkpoint says `rows` rows are durable."""
    for _ in range(1200):
        if process.poll() is not None:
            pytest.fail(f"run ended before it could be killed (exit {process.returncode})")
        try:
            if json.loads(checkpoint.read_text())["rows_done"] >= rows:
                return
        except (FileNotFoundError, json.JSONDecodeError, KeyError):
            pass
        time.sleep(0.05)
    pytest.fail("run made no progress")


def interrupt_part_way(
    command: Sequence[str],
    env: dict[str, str],
    checkpoint: Path,
    rows: int,
    how: int = signal.SIGINT,
) -> tuple[int, str]:
    """Start `command`, send `how` once `rows` rows are durable; its exit code and stderr."""
    process = start_interruptible(command, env)
    try:
        wait_for_progress(checkpoint, process, rows)
        process.send_signal(how)
        _, stderr = process.communicate(timeout=120)
    finally:
        process.kill()
    return process.returncode, stderr


def kill_part_way(command: list[str], checkpoint: Path, rows: int) -> None:
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_progress(checkpoint, process, rows)
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.wait(timeout=60)
    assert process.returncode == -signal.SIGKILL


def run_to_end(command: list[str], env: dict[str, str] | None = None) -> None:
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=600, env={**os.environ, **(env or {})}
    )
    assert result.returncode == 0, result.stderr


def test_sigkilled_real_run_resumes_to_the_uninterrupted_output(tmp_path: Path) -> None:
    """The real `assay` command on the embedded judge, killed mid-run and started again."""
    data = write_jsonl(tmp_path / "rows.jsonl", make_rows(96))
    whole, resumed = tmp_path / "whole.jsonl", tmp_path / "resumed.jsonl"
    common = ["run", str(data), "--batch-size", "8", "--stream-batch-size", "16"]
    run_to_end([str(ASSAY_BIN), *common, "--out", str(whole)])

    command = [str(ASSAY_BIN), *common, "--out", str(resumed)]
    kill_part_way(command, checkpoint_path_for(resumed), rows=16)
    partial = list(iter_output_lines(resumed))
    assert 16 <= len(partial) < 96  # really stopped part-way
    run_to_end(command)

    assert resumed.read_text() == whole.read_text()  # every row once, in order, same scores
    assert not checkpoint_path_for(resumed).exists()
    summary = json.loads(Path(f"{resumed}.summary.json").read_text())
    uninterrupted = json.loads(Path(f"{whole}.summary.json").read_text())
    # The embedding cache's counts are the invocation's own: the resumed one encoded only the
    # rows after the checkpoint. Everything the summary says of the output is the same.
    cache, whole_cache = summary.pop("embedding_cache"), uninterrupted.pop("embedding_cache")
    assert 0 < cache["hits"] + cache["misses"] < whole_cache["hits"] + whole_cache["misses"]
    assert summary["rows"] == 96
    assert summary == {**uninterrupted, "output": str(resumed)}


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_resume_after_repeated_kills_keeps_every_row_once(tmp_path: Path, suffix: str) -> None:
    data = write_jsonl(tmp_path / "rows.jsonl", make_rows(300))
    whole, resumed = tmp_path / f"whole{suffix}", tmp_path / f"resumed{suffix}"
    common = ["run", str(data), "--judge", "slow", "--batch-size", "5", "--stream-batch-size", "20"]
    run_to_end([*WITH_TEST_JUDGES, *common, "--out", str(whole)])

    command = [*WITH_TEST_JUDGES, *common, "--out", str(resumed)]
    for rows_before_kill in (40, 120):
        kill_part_way(command, checkpoint_path_for(resumed), rows_before_kill)
    durable = json.loads(checkpoint_path_for(resumed).read_text())["rows_done"]
    log = tmp_path / "scored-by-last-run.txt"
    run_to_end(command, env={"ASSAY_TEST_JUDGE_LOG": str(log)})

    # The last run scored only what was not yet durable: nothing twice.
    assert len(log.read_text().splitlines()) == 300 - durable

    resumed_lines = list(iter_output_lines(resumed))
    assert [line["row"] for line in resumed_lines] == list(range(1, 301))
    assert resumed_lines == list(iter_output_lines(whole))
    assert not Path(f"{resumed}.parts").exists()


def test_resume_with_other_options_is_refused_until_overwrite(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "rows.jsonl", make_rows(200))
    out = tmp_path / "out.jsonl"
    common = [*WITH_TEST_JUDGES, "run", str(data), "--stream-batch-size", "10", "--out", str(out)]
    kill_part_way([*common, "--judge", "slow"], checkpoint_path_for(out), rows=10)

    refused = subprocess.run([*common, "--judge", "light"], capture_output=True, text=True)
    assert refused.returncode == 2
    assert "--overwrite" in refused.stderr and "Traceback" not in refused.stderr

    run_to_end([*common, "--judge", "light", "--overwrite"])
    assert len(list(iter_output_lines(out))) == 200


class FlakyJudge(Judge):
    """Fails every question about "flaky" rows while `broken` is set; counts questions asked."""

    def __init__(self) -> None:
        self.broken = True
        self.texts_seen: list[str] = []

    async def answer(self, questions: Sequence[Question]) -> list[Verdict | JudgeFailure]:
        self.texts_seen.extend(q.generated_text for q in questions)
        return [
            JudgeFailure("transport", "connection reset")
            if self.broken and "flaky" in q.generated_text
            else Verdict(0.9)
            for q in questions
        ]


async def test_retry_failed_rescores_only_failed_rows_in_place(tmp_path: Path) -> None:
    rows = make_rows(12)
    for n in (3, 7):
        rows[n]["generated_text"] += " (flaky)"
    rows[10] = {"id": "r10", "generated_text": 42}  # wrong type: an invalid row
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    out = tmp_path / "out.parquet"
    flaky = FlakyJudge()
    register_judge("flaky", lambda: flaky)
    scorer = DetectorScorer(("output_relevance",), judge="flaky")

    first = run_file(data, out, scorer=scorer)
    assert first.detectors["output_relevance"].errors_by_kind == {"transport": 2}
    assert first.failures_by_kind == {"invalid_row": 1}
    listed = {(f["row"], f["field"], f["kind"]) for f in first.failures}
    assert listed == {
        (4, "output_relevance", "transport"),
        (8, "output_relevance", "transport"),
        (11, "generated_text", "invalid_row"),
    }
    before = list(iter_output_lines(out))

    flaky.broken = False
    flaky.texts_seen.clear()
    counts: list[int] = []
    summary, retried = await retry_failed_async(data, out, scorer, RunOptions(), counts.append)

    assert retried == 3
    # The count starts at 0: a log's rate left out the first batch, taken for resumed rows.
    assert counts[0] == 0 and counts[-1] == 3
    assert {text for text in flaky.texts_seen} == {
        rows[3]["generated_text"],
        rows[7]["generated_text"],
    }
    after = list(iter_output_lines(out))
    assert [line["row"] for line in after] == list(range(1, 13))
    for index, (old, new) in enumerate(zip(before, after, strict=True)):
        if index in (3, 7):
            assert old["output_relevance"]["error"] is True
            assert new["output_relevance"]["score"] == 1.0
        else:
            assert new == old  # untouched rows are byte-for-byte the same records
    assert summary.detectors["output_relevance"].rows_errored == 0
    assert summary.failures_by_kind == {"invalid_row": 1}  # still invalid in the input


async def test_retry_failed_keeps_the_typed_parquet_columns_of_rows_it_does_not_touch(
    tmp_path: Path,
) -> None:
    import datetime
    import decimal

    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = make_rows(4)
    rows[2]["generated_text"] += " (flaky)"
    table = pa.table(
        {
            "id": [row["id"] for row in rows],
            "user_query": [row["user_query"] for row in rows],
            "generated_text": [row["generated_text"] for row in rows],
            "when": [datetime.datetime(2024, 1, n + 1) for n in range(4)],
            "price": pa.array([decimal.Decimal(f"{n}.25") for n in range(4)], pa.decimal128(6, 2)),
            "blob": [bytes([0, 255, n]) for n in range(4)],
            "ratio": [0.5, float("nan"), 1.5, 2.5],
        }
    )
    data = tmp_path / "rows.parquet"
    pq.write_table(table, data)
    out = tmp_path / "out.parquet"
    flaky = FlakyJudge()
    register_judge("flaky", lambda: flaky)
    scorer = DetectorScorer(("output_relevance",), judge="flaky")
    run_file(data, out, scorer=scorer)
    typed = ["when", "price", "blob", "ratio"]
    before = pq.read_table(out, columns=typed).to_pylist()

    flaky.broken = False
    _, retried = await retry_failed_async(data, out, scorer, RunOptions())

    assert retried == 1
    after = pq.read_table(out, columns=typed).to_pylist()
    # Rebuilt from `record`'s JSON, a date, a decimal and bytes were lost and NaN became null.
    for index in (0, 1, 3):
        assert repr(after[index]) == repr(before[index])
    assert after[1]["ratio"] != after[1]["ratio"]  # still NaN
    assert after[2]["when"] == datetime.datetime(2024, 1, 3)  # the retried row, from the input


async def test_retry_failed_refuses_an_input_whose_rows_moved(tmp_path: Path) -> None:
    rows = make_rows(6)
    rows[2] = {"id": "r2", "generated_text": 42}  # invalid: the row a user would fix
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    out = tmp_path / "out.jsonl"
    scorer = DetectorScorer(("output_relevance",))
    run_file(data, out, scorer=scorer)
    before = out.read_bytes()

    async def refused(problem: str) -> None:
        with pytest.raises(RequestValidationError) as raised:
            await retry_failed_async(data, out, scorer, RunOptions())
        assert raised.value.field == "retry_failed" and problem in raised.value.message
        assert out.read_bytes() == before  # nothing spliced in

    write_jsonl(data, rows[:2] + rows[3:])  # the bad line deleted: the rows after it move up
    await refused("row 4 has another")
    write_jsonl(data, make_rows(8))  # another file altogether
    await refused("row")
    moved = make_rows(6)
    moved[4]["context"] = ["Guide 4: a different document altogether."]
    write_jsonl(data, moved)  # the bad row fixed, but a scored row's documents changed
    await refused("row 5 has another context")
    # A scored row broken, or stripped of a text, was let through with its old scores.
    write_jsonl(data, make_rows(6))
    data.write_text(data.read_text().replace(json.dumps(make_rows(6)[1]), "this is not json"))
    await refused("row 2 can no longer be read")
    stripped = make_rows(6)
    del stripped[1]["generated_text"]
    write_jsonl(data, stripped)
    await refused("row 2 has lost its generated_text")
    # Fixed in place, the retry goes ahead.
    write_jsonl(data, make_rows(6))
    summary, retried = await retry_failed_async(data, out, scorer, RunOptions())
    assert retried == 1 and summary.failures_by_kind == {}
    # The output now holds the fixed input's run, as a fresh run of it would: the same command
    # finds it complete, and the old, broken input is another run.
    assert finished_fingerprint(out) == run_fingerprint(data, scorer, RunControl())
    again = run_file(data, out, scorer=scorer, control=RunControl(keep_finished=True))
    assert again.already_complete
    write_jsonl(data, rows)
    with pytest.raises(RequestValidationError):
        run_file(data, out, scorer=scorer, control=RunControl(keep_finished=True))


async def test_retry_failed_refuses_other_options_than_the_run_it_completes(
    tmp_path: Path,
) -> None:
    rows = make_rows(4)
    rows[1] = {"id": "r1", "generated_text": 42}  # invalid: a row to retry
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    out = tmp_path / "out.jsonl"
    run_file(data, out, scorer=DetectorScorer(("output_relevance",), explain=True))
    write_jsonl(data, make_rows(4))  # the row fixed
    before = out.read_bytes()

    # Retried rows scored with other settings would sit beside rows scored with the first ones.
    other = DetectorScorer(("output_relevance",), explain=False)
    with pytest.raises(RequestValidationError) as raised:
        await retry_failed_async(data, out, other, RunOptions())
    assert raised.value.field == "retry_failed"
    assert "scored with other options" in raised.value.message
    assert out.read_bytes() == before
    same = DetectorScorer(("output_relevance",), explain=True)
    _, retried = await retry_failed_async(data, out, same, RunOptions())
    assert retried == 1


class StallingJudge(Judge):
    """Hangs on responses that mention "stall"; answers the rest at once."""

    async def answer(self, questions: Sequence[Question]) -> list[Verdict | JudgeFailure]:
        import asyncio

        if any("stall" in q.generated_text for q in questions):
            await asyncio.sleep(30)
        return [Verdict(0.8) for _ in questions]


def test_a_row_past_its_timeout_is_an_error_and_the_run_goes_on(tmp_path: Path) -> None:
    rows = make_rows(6)
    rows[2]["generated_text"] = "This one will stall the judge."
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    register_judge("stalling", StallingJudge)
    options = RunOptions(batch_size=1, workers=3, row_timeout=0.3)

    summary = run_file(data, tmp_path / "out.jsonl", judge="stalling", options=options)

    lines = list(iter_output_lines(tmp_path / "out.jsonl"))
    assert lines[2]["error"]["kind"] == "timeout" and lines[2]["id"] == "r2"
    assert "0.3 s per row" in lines[2]["error"]["message"]
    assert all("output_relevance" in line for n, line in enumerate(lines) if n != 2)
    assert summary.failures_by_kind == {"timeout": 1}


def test_a_timed_out_row_keeps_its_texts_and_carried_columns(tmp_path: Path) -> None:
    rows = [{**row, "team": f"team {n}"} for n, row in enumerate(make_rows(4))]
    rows[1]["answer"] = rows[1].pop("generated_text") + " It will stall the judge."
    for row in rows:
        row.setdefault("answer", row.pop("generated_text", ""))
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    register_judge("stalling", StallingJudge)
    options = RunOptions(batch_size=1, row_timeout=0.3)
    scorer = DetectorScorer(
        ("output_relevance",), judge="stalling", column_map=(("generated_text", "answer"),)
    )
    for out in (tmp_path / "out.jsonl", tmp_path / "out.parquet"):
        run_file(data, out, scorer=scorer, options=options)
        lines = list(iter_output_lines(out))
        timed_out, scored = lines[1], lines[0]
        assert timed_out["error"]["kind"] == "timeout"
        # Every key a scored row carries but its scores, with the row's own values.
        assert set(scored) - {"output_relevance"} == set(timed_out) - {"error"}
        assert timed_out["team"] == "team 1" and timed_out["generated_text"].endswith(
            "stall the judge."
        )


def test_workers_do_not_change_results_or_order(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "rows.jsonl", make_rows(40))
    one = run_file(data, tmp_path / "one.jsonl", options=RunOptions(batch_size=4, workers=1))
    four = run_file(data, tmp_path / "four.jsonl", options=RunOptions(batch_size=4, workers=4))
    assert (tmp_path / "one.jsonl").read_text() == (tmp_path / "four.jsonl").read_text()
    assert one.detectors["completeness"].to_dict() == four.detectors["completeness"].to_dict()


@pytest.mark.parametrize(
    ("options", "field"),
    [
        (RunOptions(workers=0), "workers"),
        (RunOptions(stream_batch_size=0), "stream_batch_size"),
        (RunOptions(row_timeout=-1), "row_timeout"),
        (RunOptions(row_timeout=float("nan")), "row_timeout"),
    ],
)
def test_bad_run_options_name_the_option(tmp_path: Path, options: RunOptions, field: str) -> None:
    data = write_jsonl(tmp_path / "rows.jsonl", make_rows(2))
    with pytest.raises(RequestValidationError) as raised:
        run_file(data, tmp_path / "out.jsonl", options=options)
    assert raised.value.field == field
    assert not (tmp_path / "out.jsonl").exists()


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_run_says_so_and_resumes(tmp_path: Path, how: signal.Signals) -> None:
    data = write_jsonl(tmp_path / "rows.jsonl", make_rows(200))
    out = tmp_path / "out.jsonl"
    command = [*WITH_TEST_JUDGES, "run", str(data), "--out", str(out), "--judge", "slow"]
    command += ["--batch-size", "4", "--stream-batch-size", "8"]
    env = {**os.environ, "ASSAY_TEST_JUDGE_DELAY": "0.05"}
    code, stderr = interrupt_part_way(command, env, checkpoint_path_for(out), 8, how)
    assert code == 130, stderr
    said = " ".join(stderr.split())
    kept = re.search(r"interrupted after \d+ of 200 rows were scored; (\d+) of them are kept", said)
    assert kept, stderr
    # What it says was kept is in the output, and the rerun starts after it.
    written = int(kept.group(1))
    assert 0 < written <= len(out.read_text().splitlines())
    assert f"run the same command again to resume from row {written + 1}" in said
    rerun = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    assert rerun.returncode == 0, rerun.stderr
    assert f"resuming from row {written + 1}" in " ".join(rerun.stderr.split())
    assert [line["row"] for line in iter_output_lines(out)] == list(range(1, 201))


def test_an_interrupted_rerun_leaves_no_summary_or_junit_of_the_run_before(tmp_path: Path) -> None:
    # The last run's summary and passing JUnit file stayed beside rows they did not describe: a
    # CI step publishing JUnit "always" reported a pass for a cancelled run.
    out, junit = tmp_path / "out.jsonl", tmp_path / "junit.xml"
    small = write_jsonl(tmp_path / "small.jsonl", make_rows(5))
    first = [*WITH_TEST_JUDGES, "run", str(small), "--out", str(out), "--junit", str(junit)]
    assert subprocess.run(first, capture_output=True, timeout=600).returncode == 0
    assert summary_path_for(out).exists() and junit.exists()
    data = write_jsonl(tmp_path / "rows.jsonl", make_rows(200))
    command = [*WITH_TEST_JUDGES, "run", str(data), "--out", str(out), "--judge", "slow"]
    command += ["--junit", str(junit), "--overwrite", "--batch-size", "4"]
    command += ["--stream-batch-size", "8"]
    env = {**os.environ, "ASSAY_TEST_JUDGE_DELAY": "0.05"}
    code, stderr = interrupt_part_way(command, env, checkpoint_path_for(out), 8)
    assert code == 130, stderr
    assert not summary_path_for(out).exists()
    assert not junit.exists()
    assert checkpoint_path_for(out).exists()  # the run resumes from it


@pytest.fixture
def llm_judges(monkeypatch: pytest.MonkeyPatch) -> Any:
    """`configure` for the "openai" and "cascade" judges; their own factories again after."""
    from assay import judges
    from assay.judges.openai import configure

    monkeypatch.setenv("ASSAY_LLM_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("ASSAY_LLM_MODEL", "model-a")
    yield configure
    register_judge("openai", judges._openai)
    register_judge("cascade", judges._cascade)


def test_a_run_under_another_llm_model_or_band_is_another_run(
    tmp_path: Path, llm_judges: Any
) -> None:
    # Resuming under another model (or finding a run finished under it) mixed two judges'
    # verdicts in one output: the fingerprint held the judge's name alone.
    data = write_jsonl(tmp_path / "rows.jsonl", make_rows(2))

    def fingerprint(judge: str | None) -> str:
        return run_fingerprint(data, DetectorScorer(judge=judge), RunControl())

    embedded = fingerprint(None)
    llm_judges(model="model-a")
    first, cascade = fingerprint("openai"), fingerprint("cascade")
    llm_judges(model="model-a", base_url="http://127.0.0.1:10/v1")  # served elsewhere: same
    assert fingerprint("openai") == first
    llm_judges(model="model-b")
    assert fingerprint("openai") != first and fingerprint("cascade") != cascade
    llm_judges(model="model-a", band=(0.1, 0.9))
    assert fingerprint("openai") == first and fingerprint("cascade") != cascade
    assert fingerprint(None) == embedded  # the embedded judge's runs keep their fingerprint


@pytest.mark.parametrize(("flag", "env", "used"), [(True, "false", True), (False, "true", False)])
def test_a_cache_flag_given_wins_over_the_environment(
    monkeypatch: pytest.MonkeyPatch, llm_judges: Any, flag: bool, env: str, used: bool
) -> None:
    # --cache did nothing against ASSAY_LLM_CACHE=false (only --no-cache was applied).
    from assay.cli.options import apply_llm_options
    from assay.judges import get_judge

    monkeypatch.setenv("ASSAY_LLM_CACHE", env)
    apply_llm_options(flag, None, None)
    assert get_judge("openai").settings.cache is used  # type: ignore[attr-defined]


def test_a_rerun_of_a_finished_run_keeps_its_embedding_cache_counts(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "rows.jsonl", make_rows(3))
    out = tmp_path / "out.jsonl"
    scorer = DetectorScorer(("output_relevance",))
    run_file(data, out, scorer=scorer, control=RunControl(keep_finished=True))
    summary_path = out.with_name(out.name + ".summary.json")
    recorded = json.loads(summary_path.read_text())
    recorded["embedding_cache"] = {"hits": 7, "misses": 21, "hit_rate": 0.25}
    summary_path.write_text(json.dumps(recorded))
    again = run_file(data, out, scorer=scorer, control=RunControl(keep_finished=True))
    assert again.already_complete
    # Nothing was encoded this time; the counts are those of the run that scored the rows.
    assert json.loads(summary_path.read_text())["embedding_cache"] == recorded["embedding_cache"]

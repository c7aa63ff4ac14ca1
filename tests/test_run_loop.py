"""`assay run` in the practitioner's loop: it fails fast on a file it cannot score (naming the
fix), its exit code says whether rows errored and always agrees with the JUnit file, it says
when it resumes, refuses to overwrite a finished run, prints progress lines in a log, and
prints its summary as JSON on request. All through real subprocesses."""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from assay.runner.checkpoint import checkpoint_path_for
from assay.runner.lock import lock_path_for

HERE = Path(__file__).resolve().parent
WITH_TEST_JUDGES = [sys.executable, str(HERE / "assay_with_test_judges.py")]


def assay(*arguments: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*WITH_TEST_JUDGES, *arguments],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, **(env or {})},
    )


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def qa_csv(path: Path, rows: int = 4) -> Path:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["question", "answer"])
        for n in range(rows):
            writer.writerow([f"What is item {n}?", f"Item {n} is a thing we sell."])
    return path


def rows_with(texts: list[str]) -> list[dict[str, Any]]:
    return [
        {"id": f"r{n}", "user_query": "What do you sell?", "generated_text": text}
        for n, text in enumerate(texts, start=1)
    ]


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The command's error: exactly one line (progress lines may come before it in a log)."""
    lines = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr and "Error:" not in result.stderr
    return lines[0]


# --- fail fast, name the fix -------------------------------------------------------------------


def test_a_file_no_row_of_which_can_be_scored_exits_2_with_the_columns_and_a_fix(
    tmp_path: Path,
) -> None:
    data = qa_csv(tmp_path / "qa.csv")

    result = assay("run", str(data), "--judge", "light")

    assert result.returncode == 2
    line = one_error_line(result)
    assert "no row of qa.csv can be scored" in line
    assert "columns found: question, answer" in line
    assert "missing: generated_text, user_query" in line
    assert "try --map generated_text=answer --map user_query=question" in line
    assert not (tmp_path / "qa.scored.jsonl").exists()  # nothing was scored or written

    fixed = assay(
        "run", str(data), "--judge", "light", "--map", "generated_text=answer", "--map",
        "user_query=question",
    )  # fmt: skip
    assert fixed.returncode == 0, fixed.stderr


@pytest.mark.parametrize(
    ("mapping", "expected"),
    [
        (
            ["generated_text=answr"],
            "--map: generated_text=answr: qa.csv has no column 'answr'; columns found: "
            "question, answer (did you mean --map generated_text=answer?)",
        ),
        (
            ["answer=generated_text"],
            "--map: answer=generated_text is the wrong way round: it is FIELD=COLUMN, so write "
            "--map generated_text=answer",
        ),
        (["reply=answer"], "--map: reply=answer: 'reply' is not a field Assay reads"),
        (
            ["generated_text=answer", "generated_text=question"],
            "--map: 'generated_text' is mapped twice",
        ),
        (
            ["generated_text=answer", "user_query=answer"],
            "--map: column 'answer' is mapped twice (generated_text and user_query)",
        ),
    ],
    ids=["typo", "reversed", "unknown-field", "twice", "column-twice"],
)
def test_a_map_that_cannot_work_exits_2_before_any_row_is_read(
    tmp_path: Path, mapping: list[str], expected: str
) -> None:
    data = qa_csv(tmp_path / "qa.csv")
    flags = [part for spec in mapping for part in ("--map", spec)]

    result = assay("run", str(data), "--judge", "light", *flags)

    assert result.returncode == 2
    assert one_error_line(result).startswith(f"error: {expected}")


def test_a_map_onto_a_column_the_file_has_is_refused(tmp_path: Path) -> None:
    rows = [{"user_query": "Why?", "generated_text": "old answer", "answer": "new answer"}]
    data = write_jsonl(tmp_path / "rows.jsonl", rows)

    result = assay("run", str(data), "--judge", "light", "--map", "generated_text=answer")

    assert result.returncode == 2
    assert one_error_line(result).startswith(
        "error: --map: generated_text=answer: rows.jsonl also has a column 'generated_text'"
    )


def test_a_file_whose_every_row_is_rejected_exits_2(tmp_path: Path) -> None:
    rows = [{"user_query": "Why?", "generated_text": "   "} for _ in range(3)]
    data = write_jsonl(tmp_path / "blank.jsonl", rows)

    result = assay("run", str(data), "--judge", "light", "--allow-errors")

    assert result.returncode == 2
    line = one_error_line(result)
    assert "no row of" in line and "could be scored: all 3 were rejected" in line
    assert "generated_text: 3" in line


# --- exit codes that agree with JUnit ----------------------------------------------------------


def junit_counts(path: Path) -> dict[str, int]:
    suite = ET.parse(path).getroot()
    return {key: int(suite.get(key, "0")) for key in ("tests", "failures", "errors", "skipped")}


@pytest.mark.parametrize(
    ("texts", "extra", "code", "counts"),
    [
        # The light judge follows every instruction for "fine answer" (score 1) and none for
        # "no" (score 0); the picky one fails rows that say FAIL.
        (["fine answer", "another fine answer"], [], 0, (2, 0, 0, 0)),
        (["fine answer", "this FAILS to score"], [], 3, (2, 0, 1, 0)),
        (["fine answer", "this FAILS to score"], ["--allow-errors"], 0, (2, 0, 0, 1)),
        (["fine answer", "no"], ["--fail-under", "output_relevance=0.6"], 1, (3, 1, 0, 0)),
        # The errored row counts against the gate (1.0 over one row is 0.5 over two), and a
        # failed gate wins over exit code 3.
        (
            ["fine answer", "this FAILS to score"],
            ["--fail-under", "output_relevance=0.6"],
            1,
            (3, 1, 1, 0),
        ),
    ],
    ids=["clean", "errored", "errors-allowed", "gate-failed", "errors-fail-the-gate"],
)
def test_exit_code_and_junit_always_agree(
    tmp_path: Path, texts: list[str], extra: list[str], code: int, counts: tuple[int, ...]
) -> None:
    data = write_jsonl(tmp_path / "rows.jsonl", rows_with(texts))
    junit = tmp_path / "junit.xml"

    result = assay("run", str(data), "--judge", "picky", "--junit", str(junit), *extra)

    assert result.returncode == code, result.stderr
    found = junit_counts(junit)
    assert (found["tests"], found["failures"], found["errors"], found["skipped"]) == counts
    # The one rule: the command fails exactly when the JUnit file has a failure or an error.
    assert (result.returncode != 0) == bool(found["failures"] or found["errors"])
    if code == 3:
        assert "1 of 2 rows errored" in one_error_line(result)


def test_the_summary_says_why_rows_were_not_scored(tmp_path: Path) -> None:
    rows = [*rows_with(["slow answer", "another"]), {"id": "bad", "user_query": "Hi?"}]
    data = write_jsonl(tmp_path / "rows.jsonl", rows)

    result = assay(
        "run", str(data), "--judge", "slow", "--row-timeout", "0.05", "--batch-size", "1",
        env={"ASSAY_TEST_JUDGE_DELAY": "1"},
    )  # fmt: skip

    assert result.returncode == 3, result.stderr
    assert "3 of 3 rows were not scored (2 timed out, 1 rejected)" in result.stdout


def test_the_map_hint_feeds_every_detector_the_file_can_feed(tmp_path: Path) -> None:
    # With a context column, mapping the answer alone would run completeness only: the hint
    # also maps the question, so output_relevance runs too.
    data = tmp_path / "qac.csv"
    data.write_text("question,answer,context\nWhat?,An answer.,A context.\n", encoding="utf-8")

    result = assay("run", str(data), "--judge", "light")

    assert result.returncode == 2
    line = one_error_line(result)
    assert "missing: generated_text (" in line
    assert line.endswith("try --map generated_text=answer --map user_query=question")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--out", "/dev/null/x.jsonl"], "error: --out: cannot write /dev/null/x.jsonl: /dev/null"),
        (["--junit", "/dev/null/x.xml"], "error: --junit: cannot write /dev/null/x.xml: /dev/null"),
    ],
)
def test_where_results_go_is_checked_before_scoring(
    tmp_path: Path, flags: list[str], message: str
) -> None:
    data = write_jsonl(tmp_path / "rows.jsonl", rows_with(["fine answer"]))

    result = assay("run", str(data), "--judge", "light", *flags)

    assert result.returncode == 2
    assert one_error_line(result).startswith(message)
    assert not (tmp_path / "rows.scored.jsonl").exists()


@pytest.mark.parametrize("beside", ["summary.json", "checkpoint.json", "lock"])
def test_a_junit_file_may_not_be_a_file_the_run_keeps_beside_its_output(
    tmp_path: Path, beside: str
) -> None:
    # --junit out.jsonl.summary.json wrote XML over the summary, and the next run refused the
    # output as another run's.
    data = write_jsonl(tmp_path / "rows.jsonl", rows_with(["fine answer"]))
    out = tmp_path / "out.jsonl"
    junit = {
        "summary.json": tmp_path / "out.jsonl.summary.json",
        "checkpoint.json": checkpoint_path_for(out),
        "lock": lock_path_for(out),
    }[beside]

    result = assay("run", str(data), "--judge", "light", "--out", str(out), "--junit", str(junit))

    assert result.returncode == 2
    assert one_error_line(result).startswith("error: --junit: must not be --out's ")
    assert not out.exists()


def test_a_gate_counts_errored_rows_as_failures(tmp_path: Path) -> None:
    # The light judge scores "fine answer" 1.0 on output_relevance; one row of two errors, so
    # the gate sees 0.5: above 0.5 it fails, though the mean of the scored rows is 1.0.
    data = write_jsonl(tmp_path / "rows.jsonl", rows_with(["fine answer", "FAIL"]))
    summary_mean = assay("run", str(data), "--judge", "picky", "--allow-errors", "--json")
    mean = json.loads(summary_mean.stdout)["scorers"]["output_relevance"]["mean_score"]

    gated = assay(
        "run", str(data), "--judge", "picky", "--fail-under", f"output_relevance={mean:.4f}"
    )

    assert gated.returncode == 1
    assert "counting the 1 row it could not score as failures" in one_error_line(gated)


# --- long work says what it is doing -----------------------------------------------------------


def test_resuming_says_from_which_row_and_a_finished_output_is_not_overwritten(
    tmp_path: Path,
) -> None:
    rows = rows_with([f"answer number {n}" for n in range(30)])
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    out = tmp_path / "out.jsonl"
    common = ["run", str(data), "--out", str(out), "--stream-batch-size", "10"]
    # A run killed part-way: its checkpoint says 10 rows are durable.
    slow = subprocess.Popen(
        [*WITH_TEST_JUDGES, *common, "--judge", "slow", "--batch-size", "1"],
        env={**os.environ, "ASSAY_TEST_JUDGE_DELAY": "0.2"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    checkpoint = checkpoint_path_for(out)
    try:
        while not (checkpoint.exists() and json.loads(checkpoint.read_text())["rows_done"] >= 10):
            assert slow.poll() is None, "the run ended before it could be interrupted"
    finally:
        slow.kill()
        slow.wait()
    done = json.loads(checkpoint.read_text())["rows_done"]

    resumed = assay(*common, "--judge", "slow")
    again = assay(*common, "--judge", "slow")
    other = assay(*common, "--judge", "light")
    replaced = assay(*common, "--judge", "light", "--overwrite")

    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming from row {done + 1} of 30" in resumed.stderr
    # The same command on a finished run: already complete, summary and gates as before.
    assert again.returncode == 0, again.stderr
    assert "already holds this run (30 rows); nothing to score" in again.stderr
    assert "output_relevance" in again.stdout
    assert "wrote " not in again.stdout  # nothing was
    # Another run over a finished output is refused until --overwrite.
    assert other.returncode == 2
    # It suggested --retry-failed as if for this input, which then failed ("row counts differ").
    assert "holds a finished run of other input or options; pass --overwrite to replace it" in (
        one_error_line(other)
    )
    assert "--retry-failed with that run's own input and options" in one_error_line(other)
    assert replaced.returncode == 0, replaced.stderr
    assert len(out.read_text().splitlines()) == 30


def test_an_out_file_no_run_wrote_is_refused_and_a_hard_linked_input_too(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "rows.jsonl", rows_with(["answer one", "answer two"]))
    dataset = write_jsonl(tmp_path / "other.jsonl", rows_with(["a dataset, not a run"]))
    before = dataset.read_bytes()
    linked = tmp_path / "linked.jsonl"
    os.link(data, linked)

    for extra in ([], ["--retry-failed"]):
        refused = assay("run", str(data), "--out", str(dataset), "--judge", "light", *extra)
        # It said "holds a finished run; pass --overwrite", which destroyed the dataset.
        assert refused.returncode == 2
        assert "exists but is no Assay run's output" in one_error_line(refused)
    same = assay("run", str(data), "--out", str(linked), "--judge", "light", "--overwrite")

    assert dataset.read_bytes() == before
    assert same.returncode == 2 and "must not be the input file" in one_error_line(same)
    assert len(data.read_text().splitlines()) == 2  # the input was emptied before


def test_a_second_run_on_the_same_output_is_refused_while_the_first_writes(
    tmp_path: Path,
) -> None:
    # Both "resumed" the same output, scored its rows twice and tripped over the checkpoint.
    data = write_jsonl(tmp_path / "rows.jsonl", rows_with([f"answer {n}" for n in range(20)]))
    out = tmp_path / "out.jsonl"
    common = ["run", str(data), "--out", str(out), "--judge", "slow", "--batch-size", "1"]
    env = {**os.environ, "ASSAY_TEST_JUDGE_DELAY": "0.2"}
    first = subprocess.Popen(
        [*WITH_TEST_JUDGES, *common, "--stream-batch-size", "2"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        checkpoint = checkpoint_path_for(out)
        while not (checkpoint.exists() and json.loads(checkpoint.read_text())["rows_done"] >= 2):
            assert first.poll() is None, "the first run ended before the second could start"
        second = subprocess.run(
            [*WITH_TEST_JUDGES, *common], env=env, capture_output=True, text=True, check=False
        )
    finally:
        first.wait()
    again = subprocess.run(
        [*WITH_TEST_JUDGES, *common], env=env, capture_output=True, text=True, check=False
    )

    assert second.returncode == 2
    assert f"another assay run is writing {out}" in one_error_line(second)
    assert first.returncode == 0
    assert again.returncode == 0 and "already holds this run" in again.stderr  # lock released
    assert not out.with_name("out.jsonl.lock").exists()


def test_retry_failed_on_a_run_without_failures_says_so(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "rows.jsonl", rows_with(["answer one", "answer two"]))
    common = ["run", str(data), "--out", str(tmp_path / "out.jsonl"), "--judge", "light"]
    assert assay(*common).returncode == 0

    retried = assay(*common, "--retry-failed")

    assert retried.returncode == 0, retried.stderr
    assert "has no failed rows to retry (2 rows); nothing to score." in retried.stderr
    assert "output_relevance" in retried.stdout  # the tables, as the plain rerun prints them


def test_retry_failed_progress_counts_the_failed_rows(tmp_path: Path) -> None:
    texts = [f"answer {n}" for n in range(10)]
    data = write_jsonl(tmp_path / "rows.jsonl", rows_with([*texts[:8], " ", " "]))
    common = ["run", str(data), "--out", str(tmp_path / "out.jsonl"), "--judge", "light"]
    assert assay(*common).returncode == 3
    write_jsonl(data, rows_with(texts))  # fixed in place

    retried = assay(*common, "--retry-failed", env={"ASSAY_PROGRESS_SECONDS": "0"})

    assert retried.returncode == 0, retried.stderr
    # It counted against the input's 10 rows: "retrying: 2/10 rows".
    assert re.search(r"^retrying: 2/2 rows", retried.stderr, flags=re.M), retried.stderr
    assert "/10 rows" not in retried.stderr


def test_a_log_gets_a_progress_line_every_few_seconds(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "rows.jsonl", rows_with([f"answer {n}" for n in range(40)]))

    # stderr is a pipe here, as in CI; an interval of 0 prints at every update.
    result = assay(
        "run", str(data), "--judge", "light", "--stream-batch-size", "10", "--batch-size", "5",
        env={"ASSAY_PROGRESS_SECONDS": "0"},
    )  # fmt: skip

    assert result.returncode == 0, result.stderr
    progress = re.findall(
        r"^scoring: (\d+)/40 rows, [\d.]+ rows/s, ETA \S+$", result.stderr, flags=re.M
    )
    assert len(progress) >= 4
    assert [int(n) for n in progress] == sorted(int(n) for n in progress)
    assert re.search(r"^scoring: 40 rows done in \S+", result.stderr, flags=re.M)
    assert "\x1b[" not in result.stderr  # plain lines, no terminal control codes
    # A value that is no number of seconds is named and the default used (it was silent).
    odd = assay("run", str(data), "--judge", "light", env={"ASSAY_PROGRESS_SECONDS": "abc"})
    assert odd.returncode == 0, odd.stderr
    assert "warning: ASSAY_PROGRESS_SECONDS='abc' is not a number of seconds" in odd.stderr


def test_a_resumed_run_s_last_progress_line_counts_its_own_rows() -> None:
    from rich.console import Console
    from rich.progress import TaskID

    from assay.cli.common import LineProgress

    console = Console(record=True, width=200, markup=False)
    lines = LineProgress("scoring", console, 0)
    lines.update(TaskID(0), total=400, completed=224)  # found done when the run resumed
    for done in (300, 400):
        lines.update(TaskID(0), completed=done)
    lines.finish()
    # It said "400 rows done in 4s" of the 176 this run scored.
    last = console.export_text().splitlines()[-1]
    assert re.fullmatch(r"scoring: 176 rows done in \S+ \(.+\); 224 were done before", last)


def test_a_log_gets_a_progress_line_each_interval_while_no_row_comes_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An LLM run reports its rows a batch at a time: its log stayed empty until the end."""
    from rich.console import Console
    from rich.progress import TaskID

    from assay.cli import common

    clock = [100.0]
    monkeypatch.setattr(common.time, "monotonic", lambda: clock[0])
    console = Console(record=True, width=200, markup=False)
    lines = common.LineProgress("scoring", console, 5)
    lines.tick()  # before the run has started: nothing to say
    lines.update(TaskID(0), total=3, completed=0)
    for now in (103.0, 106.0, 108.0, 111.5):
        clock[0] = now
        lines.tick()
    said = console.export_text().splitlines()
    # At 106 (6 s after the start) and at 111.5 (5.5 s after that line); not at 103 or 108.
    assert said == ["scoring: 0/3 rows, – rows/s"] * 2
    lines.finish()
    clock[0] = 200.0
    lines.tick()  # a tick that was under way when the run ended: nothing after the last line
    assert console.export_text().splitlines()[-1].startswith("scoring: 0 rows done in")


def test_the_progress_thread_of_a_log_ticks_and_stops(monkeypatch: pytest.MonkeyPatch) -> None:

    from assay.cli import common

    ticks: list[float] = []
    monkeypatch.setattr(common.LineProgress, "tick", lambda self: ticks.append(self.interval))
    monkeypatch.setenv(common.PROGRESS_SECONDS_ENV, "0.01")
    with common.progress_bar("scoring") as (progress, task):
        progress.update(task, total=1, completed=0)
        deadline = time.monotonic() + 30
        while not ticks and time.monotonic() < deadline:
            time.sleep(0.01)
    assert ticks and set(ticks) == {0.01}
    stopped = len(ticks)
    time.sleep(0.1)
    assert len(ticks) <= stopped + 1  # at most one tick already under way when it stopped


# --- JSON out ----------------------------------------------------------------------------------


def test_run_json_prints_the_summary_and_the_gates(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "rows.jsonl", rows_with(["fine answer", "another answer"]))

    result = assay(
        "run", str(data), "--judge", "light", "--json", "--fail-under", "output_relevance=0.1"
    )

    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["rows"] == 2 and report["rows_with_errors"] == 0
    assert report["scorers"]["output_relevance"]["rows_scored"] == 2
    assert report["gates"] == [
        {"gate": "--fail-under output_relevance=0.1", "passed": True, "message": None}
    ]


def test_a_resumed_parquet_run_says_its_rows_are_in_the_parts_folder(tmp_path: Path) -> None:
    from assay.cli.run import _resume_message

    out = tmp_path / "big.parquet"
    (tmp_path / "big.parquet.parts").mkdir()
    # It named big.parquet, which does not exist until the run ends.
    assert _resume_message(16, 40, out).endswith(f"({out}.parts has the rows before it)")
    jsonl = tmp_path / "big.jsonl"
    assert _resume_message(16, 40, jsonl).endswith(f"({jsonl} has the rows before it)")

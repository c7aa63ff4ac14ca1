"""`assay run` on hostile rows: no row can end a run, every output line is valid JSON, one row's
failure is that row's alone, and a resume notices an edit anywhere in the input."""

from __future__ import annotations

import asyncio
import datetime
import decimal
import json
import logging
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from assay.judges import Judge, Question, Verdict, register_judge
from assay.runner import RunOptions, iter_output_lines, run_file
from assay.runner.checkpoint import Checkpoint, checkpoint_path_for, fingerprint, save_checkpoint
from assay.runner.local import scorer_fingerprint
from assay.runner.rows import DetectorScorer
from assay.schema import JudgeFailure, RequestValidationError

ASSAY_BIN = Path(sys.executable).with_name("assay")


@pytest.fixture(autouse=True)
def _embedded_judge_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ASSAY_JUDGE", raising=False)


def good_row(n: int) -> dict[str, Any]:
    return {
        "id": f"r{n}",
        "user_query": f"How long is the return window for order {n}?",
        "generated_text": f"Order {n} can be returned within 30 days of delivery.",
    }


def hostile_jsonl(path: Path) -> Path:
    """14 good rows with five hostile ones among them, written as a hostile client would
    (lone surrogates as JSON escapes, bare NaN, a 5000-digit integer)."""
    lines = [json.dumps(good_row(n)) for n in range(14)]
    lines[2] = json.dumps(good_row(2) | {"id": "bad id \ud800"})
    lines[5] = json.dumps(good_row(5) | {"generated_text": "text \udfff"})
    lines[8] = json.dumps(good_row(8))[:-1] + ', "amount": ' + "7" * 5000 + "}"
    lines[10] = json.dumps(good_row(10) | {"weight": float("nan")})
    lines[12] = json.dumps(good_row(12) | {"weight": float("-inf"), "ratio": float("nan")})
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def strict_json(text: str) -> Any:
    def refuse(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    text.encode("utf-8")  # raises on lone surrogates
    return json.loads(text, parse_constant=refuse)


def check_hostile_output(out: Path) -> list[dict[str, Any]]:
    lines = [strict_json(text) for text in out.read_text(encoding="utf-8").splitlines()]
    assert [line["row"] for line in lines] == list(range(1, 15))
    assert lines[2]["error"] == {
        "field": "id",
        "kind": "invalid_row",
        "message": lines[2]["error"]["message"],
    }
    assert "lone surrogate (U+D800" in lines[2]["error"]["message"]
    assert lines[2]["id"] == "bad id \ufffd"  # written, with the bad character replaced
    assert lines[5]["error"]["field"] == "generated_text"
    assert lines[8]["error"] == {
        "field": "row",
        "kind": "invalid_row",
        "message": "line 9 holds an integer too long to read (over 4,300 digits)",
    }
    assert lines[10]["weight"] is None and "output_relevance" in lines[10]
    assert lines[12]["weight"] is None and lines[12]["ratio"] is None
    for index, line in enumerate(lines):
        if index not in (2, 5, 8):
            assert line["output_relevance"]["instructions_list"], line
    return lines


def test_hostile_rows_cost_only_their_row(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    data = hostile_jsonl(tmp_path / "rows.jsonl")
    with caplog.at_level(logging.WARNING, logger="assay.runner.writers"):
        summary = run_file(data, tmp_path / "out.jsonl", options=RunOptions(batch_size=32))
    check_hostile_output(tmp_path / "out.jsonl")
    assert summary.failures_by_kind == {"invalid_row": 3}
    warnings = [r for r in caplog.records if "NaN or Infinity" in r.getMessage()]
    assert len(warnings) == 1  # once per run, not once per value
    # It names where the first one was (line 11's "weight"), not only "the output".
    assert warnings[0].getMessage().startswith("weight holds NaN or Infinity")


def test_assay_run_finishes_on_hostile_rows(tmp_path: Path) -> None:
    """These rows once ended the command with exit 1, and resuming could not get past them.
    Now the run finishes: exit 3 says rows errored, and --allow-errors makes that 0."""
    data = hostile_jsonl(tmp_path / "rows.jsonl")
    out = tmp_path / "out.jsonl"
    finished = subprocess.run(
        [str(ASSAY_BIN), "run", str(data), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert finished.returncode == 3, finished.stderr
    assert "3 of 14 rows errored" in finished.stderr
    allowed = subprocess.run(
        [str(ASSAY_BIN), "run", str(data), "--out", str(out), "--allow-errors"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert allowed.returncode == 0, allowed.stderr
    assert "Traceback" not in finished.stderr
    check_hostile_output(out)


def test_parquet_output_takes_hostile_rows_too(tmp_path: Path) -> None:
    data = hostile_jsonl(tmp_path / "rows.jsonl")
    run_file(data, tmp_path / "out.parquet")
    lines = list(iter_output_lines(tmp_path / "out.parquet"))
    assert [line["row"] for line in lines] == list(range(1, 15))
    assert lines[2]["id"] == "bad id \ufffd" and lines[10]["weight"] is None


def test_values_json_has_no_type_for_are_written_as_text(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table(
        {
            "user_query": ["How long is the return window?"] * 2,
            "generated_text": ["Returns are accepted within 30 days.", "Thirty days."],
            "when": [datetime.datetime(2024, 5, 1, 12, 30), None],
            "price": pa.array([decimal.Decimal("19.99"), decimal.Decimal("5.00")]),
            "blob": [b"\x00\x01", b"ok"],
        }
    )
    pq.write_table(table, tmp_path / "rows.parquet")
    run_file(tmp_path / "rows.parquet", tmp_path / "out.jsonl")
    first, second = list(iter_output_lines(tmp_path / "out.jsonl"))
    assert first["when"] == "2024-05-01T12:30:00" and first["price"] == "19.99"
    assert second["blob"] == "ok" and second["when"] is None  # a carried null stays null
    assert "output_relevance" in first and "output_relevance" in second


def test_a_csv_row_that_is_not_utf8_is_one_bad_row(tmp_path: Path) -> None:
    data = tmp_path / "rows.csv"
    data.write_bytes(
        b"id,user_query,generated_text,team\n"
        b"a,How long is the return window?,Returns within 30 days.,x\n"
        b"b,How long is the return window?,Returns \xff\xfe within 30 days.,y\n"
        b"c,How long is the return window?,Thirty days from delivery.,z\n"
        b"d\xff,How long is the return window?,Thirty days.,w\n"
    )
    run_file(data, tmp_path / "out.jsonl")
    lines = list(iter_output_lines(tmp_path / "out.jsonl"))
    assert [line["row"] for line in lines] == [1, 2, 3, 4]
    assert lines[1]["error"]["field"] == "generated_text"
    assert lines[1]["error"]["message"] == "is not valid UTF-8 text"
    assert "output_relevance" in lines[0] and "output_relevance" in lines[2]
    # The bad row keeps its other columns, so it can be found by its id; a bad byte in a
    # carried-through column is written as U+FFFD.
    assert (lines[1]["id"], lines[1]["team"]) == ("b", "y")
    assert lines[3]["error"]["field"] == "id" and lines[3]["id"] == "d\ufffd"


def test_a_csv_cell_over_the_csv_modules_limit_rejects_only_its_row(tmp_path: Path) -> None:
    # Python's csv module refuses cells over 131,072 characters by default, ending the run.
    data = tmp_path / "rows.csv"
    data.write_text(
        "id,user_query,generated_text,blob\n"
        f"a,How long is the return window?,Returns within 30 days.,{'x' * 200_000}\n"
        f"b,How long is the return window?,{'y' * 150_000},ok\n"
    )
    run_file(data, tmp_path / "out.jsonl")
    first, second = list(iter_output_lines(tmp_path / "out.jsonl"))
    assert "output_relevance" in first and len(first["blob"]) == 200_000
    assert second["error"]["field"] == "generated_text"
    assert "150000 characters" in second["error"]["message"]


class _RaisesOnPoison(Judge):
    """Fault injection: any call that includes "poison" raises, as a broken backend would."""

    async def answer(self, questions: Sequence[Question]) -> list[Verdict | JudgeFailure]:
        if any("poison" in q.generated_text for q in questions):
            raise RuntimeError("backend choked")
        return [Verdict(0.8) for _ in questions]


class _StallsOnPoison(Judge):
    """Fault injection: any call that includes "poison" hangs."""

    async def answer(self, questions: Sequence[Question]) -> list[Verdict | JudgeFailure]:
        if any("poison" in q.generated_text for q in questions):
            await asyncio.sleep(60)
        return [Verdict(0.8) for _ in questions]


def _poisoned_rows(path: Path, count: int, poisoned: int) -> Path:
    rows = [good_row(n) for n in range(count)]
    rows[poisoned]["generated_text"] = "This answer is poison for the judge."
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def test_a_row_that_breaks_its_judge_call_fails_alone(tmp_path: Path) -> None:
    """16 of 17 rows of a batch once failed with the one row that broke the call."""
    register_judge("raises-on-poison", _RaisesOnPoison)
    data = _poisoned_rows(tmp_path / "rows.jsonl", 17, poisoned=6)
    summary = run_file(
        data, tmp_path / "out.jsonl", judge="raises-on-poison", options=RunOptions(batch_size=17)
    )
    lines = list(iter_output_lines(tmp_path / "out.jsonl"))
    assert lines[6]["output_relevance"] == {
        "error": True,
        "kind": "judge_error",
        "message": "RuntimeError: backend choked",
    }
    assert [n for n, line in enumerate(lines) if "score" in line["output_relevance"]] == [
        n for n in range(17) if n != 6
    ]
    assert summary.detectors["output_relevance"].rows_errored == 1


def test_a_row_that_stalls_its_call_times_out_alone(tmp_path: Path) -> None:
    register_judge("stalls-on-poison", _StallsOnPoison)
    data = _poisoned_rows(tmp_path / "rows.jsonl", 8, poisoned=2)
    options = RunOptions(batch_size=4, workers=2, row_timeout=0.2)
    summary = run_file(data, tmp_path / "out.jsonl", judge="stalls-on-poison", options=options)
    lines = list(iter_output_lines(tmp_path / "out.jsonl"))
    assert lines[2]["error"]["kind"] == "timeout" and lines[2]["id"] == "r2"
    assert [n for n, line in enumerate(lines) if "output_relevance" in line] == [
        0,
        1,
        3,
        4,
        5,
        6,
        7,
    ]
    assert summary.failures_by_kind == {"timeout": 1}


def _same_ends(path: Path, middle: bytes) -> Path:
    """3 MiB whose first and last MiB never change; only `middle` differs."""
    path.write_bytes(b"a" * (1 << 20) + middle * (1 << 20) + b"z" * (1 << 20))
    return path


def test_the_fingerprint_covers_the_middle_of_a_large_input(tmp_path: Path) -> None:
    one = fingerprint(_same_ends(tmp_path / "one.jsonl", b"m"), {"o": 1})
    two = fingerprint(_same_ends(tmp_path / "two.jsonl", b"n"), {"o": 1})
    assert one != two
    assert one == fingerprint(tmp_path / "one.jsonl", {"o": 1})
    assert one != fingerprint(tmp_path / "one.jsonl", {"o": 2})


def test_a_resume_refuses_an_input_edited_in_the_middle(tmp_path: Path) -> None:
    rows = [good_row(n) | {"padding": "p" * 2000} for n in range(1500)]  # about 3 MiB
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    out = tmp_path / "out.jsonl"
    scorer = DetectorScorer()
    # What an unfinished run over the original input leaves behind.
    save_checkpoint(
        checkpoint_path_for(out), Checkpoint(fingerprint(data, scorer_fingerprint(scorer)))
    )
    # Same length, so only the bytes in the middle differ.
    rows[750]["generated_text"] = rows[750]["generated_text"].replace("30 days", "31 days")
    data.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")

    with pytest.raises(RequestValidationError, match="different input or options"):
        run_file(data, out, scorer=scorer)


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-32"])
def test_a_utf16_or_utf32_file_is_one_error_naming_the_encoding(
    tmp_path: Path, suffix: str, encoding: str
) -> None:
    """Read per line as UTF-8, each of its lines was a row of its own, each unreadable."""
    text = json.dumps(good_row(1)) + "\n" if suffix == ".jsonl" else "id,generated_text\na,b\n"
    data = tmp_path / f"rows{suffix}"
    data.write_bytes(text.encode(encoding))
    with pytest.raises(RequestValidationError, match="looks like UTF-16 or UTF-32 text"):
        run_file(data, tmp_path / "out.jsonl")
    assert not (tmp_path / "out.jsonl").exists()


def test_a_cut_off_json_line_is_reported_at_its_own_column(tmp_path: Path) -> None:
    """The line end is no part of the error's place (it was "column 1" of a line after it)."""
    data = tmp_path / "rows.jsonl"
    cut = '{"id": "c", "user_query": "x", "generated_text": '
    data.write_text(json.dumps(good_row(1)) + "\n" + cut + "\r\n", encoding="utf-8")
    run_file(data, tmp_path / "out.jsonl")
    lines = list(iter_output_lines(tmp_path / "out.jsonl"))
    assert lines[1]["error"]["message"] == (
        f"line 2 is not valid JSON: Expecting value at column {len(cut) + 1}"
    )

"""Datasets in JSONL, CSV and Parquet give the same records in JSONL or Parquet; differently named
columns can be mapped; a 200,000-row run stays within a fixed memory bound."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from assay.runner import iter_output_lines, read_rows, run_file
from assay.runner.rows import DetectorScorer

HERE = Path(__file__).resolve().parent
WITH_TEST_JUDGES = [sys.executable, str(HERE / "assay_with_test_judges.py")]

ROWS: list[dict[str, Any]] = [
    {
        "id": "eggs",
        "user_query": "How long should I boil eggs for a soft yolk?",
        "context": ["Cook cold eggs in boiling water for 6 minutes for a runny yolk."],
        "generated_text": "Boil them for 6 minutes for a soft, runny yolk.",
    },
    {
        "id": "vpn",
        "user_query": "How do I connect to the office VPN?",
        "context": ["Install the SecureLink client and sign in with your work email."],
        "generated_text": "Our cafeteria serves pasta on Fridays.",
    },
    {
        "id": "tomatoes",
        "user_query": "How often should I water tomato plants?",
        "context": ["Water tomatoes deeply two or three times a week."],
        "generated_text": "Water them deeply two or three times a week, more in a heatwave.",
    },
]


def write_dataset(path: Path, rows: list[dict[str, Any]]) -> Path:
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    elif path.suffix == ".csv":
        with path.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            for row in rows:
                writer.writerow({**row, "context": json.dumps(row["context"])})
    else:
        pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def assay_run(*args: str) -> subprocess.CompletedProcess[str]:
    """`assay run ARGS` with the test judges, its output captured."""
    return subprocess.run(
        [*WITH_TEST_JUDGES, "run", *args], capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("output_suffix", [".jsonl", ".parquet"])
def test_every_input_format_gives_the_same_records(tmp_path: Path, output_suffix: str) -> None:
    records = {}
    for input_suffix in (".jsonl", ".csv", ".parquet"):
        data = write_dataset(tmp_path / f"rows{input_suffix}", ROWS)
        out = tmp_path / f"out-{input_suffix[1:]}{output_suffix}"
        summary = run_file(data, out)
        assert summary.rows == 3 and summary.rows_failed == 0
        records[input_suffix] = list(iter_output_lines(out))
    assert records[".jsonl"] == records[".csv"] == records[".parquet"]
    assert [line["id"] for line in records[".jsonl"]] == ["eggs", "vpn", "tomatoes"]
    off_topic = records[".jsonl"][1]["output_relevance"]["score"]
    assert off_topic < records[".jsonl"][0]["output_relevance"]["score"]


def test_parquet_output_has_queryable_score_columns(tmp_path: Path) -> None:
    out = tmp_path / "out.parquet"
    run_file(write_dataset(tmp_path / "rows.jsonl", ROWS), out)
    table = pq.read_table(out)
    assert table.column_names == [
        "row",
        "id",
        "user_query",
        "context",
        "generated_text",
        "record",
        "output_relevance.score",
        "completeness.score",
    ]
    assert table.column("generated_text").to_pylist() == [r["generated_text"] for r in ROWS]
    assert table.column("context").to_pylist() == [r["context"] for r in ROWS]
    records = [json.loads(text) for text in table.column("record").to_pylist()]
    assert table.column("output_relevance.score").to_pylist() == [
        r["output_relevance"]["score"] for r in records
    ]
    assert table.column("row").to_pylist() == [1, 2, 3]


@pytest.mark.parametrize("input_suffix", [".jsonl", ".parquet", ".csv"])
def test_parquet_output_gives_each_passed_through_column_its_own_column(
    tmp_path: Path, input_suffix: str
) -> None:
    extra = [
        {"label": True, "turns": 3, "cost": 0.5, "team": "a", "tags": ["x"]},
        {"label": False, "turns": 4, "cost": 1, "team": "b", "tags": ["y", "z"]},
        {"label": True, "turns": 5, "cost": 2.5, "team": "c", "tags": []},
    ]
    rows = [{**row, **more} for row, more in zip(ROWS, extra, strict=True)]
    if input_suffix == ".csv":
        rows = [{k: json.dumps(v) if k == "tags" else v for k, v in r.items()} for r in rows]
    out = tmp_path / "out.parquet"

    run_file(write_dataset(tmp_path / f"rows{input_suffix}", rows), out)

    table = pq.read_table(out)
    carried = ["label", "turns", "cost", "team", "tags"]
    assert table.column_names[2:10] == ["user_query", "context", "generated_text", *carried]
    assert table.column("team").to_pylist() == ["a", "b", "c"]
    records = [json.loads(text) for text in table.column("record").to_pylist()]
    assert [r["turns"] for r in records] == [
        str(m["turns"]) if input_suffix == ".csv" else m["turns"] for m in extra
    ]
    if input_suffix == ".csv":  # CSV has only text
        assert {table.schema.field(c).type for c in carried} == {pa.string()}
        return
    assert table.schema.field("label").type == pa.bool_()
    assert table.schema.field("turns").type == pa.int64()
    assert table.schema.field("cost").type == pa.float64()
    assert table.column("label").to_pylist() == [True, False, True]
    assert table.column("turns").to_pylist() == [3, 4, 5]
    assert table.column("cost").to_pylist() == [0.5, 1.0, 2.5]
    tags = table.column("tags").to_pylist()
    # JSON Lines lists are kept as JSON text; Parquet lists keep their type.
    assert tags == (
        ['["x"]', '["y", "z"]', "[]"] if input_suffix == ".jsonl" else [["x"], ["y", "z"], []]
    )


def test_a_later_value_that_does_not_fit_its_parquet_column_is_null_and_warned_of(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The column's type comes from the first rows (1,000; 2 here). Arrow cut a later 2.75 to 2
    # in an integer column without a word.
    monkeypatch.setattr("assay.runner.carried.SAMPLE_ROWS", 2)
    prices = [2, 3, 2.75, 4.0, "text"]
    rows = [{**ROWS[i % len(ROWS)], "price": p} for i, p in enumerate(prices)]
    out = tmp_path / "out.parquet"
    with caplog.at_level("WARNING", logger="assay.runner.writers"):
        run_file(write_dataset(tmp_path / "rows.jsonl", rows), out)
    table = pq.read_table(out)
    assert table.schema.field("price").type == pa.int64()
    assert table.column("price").to_pylist() == [2, 3, None, 4, None]
    records = [json.loads(text) for text in table.column("record").to_pylist()]
    assert [r["price"] for r in records] == prices
    [warning] = [r.getMessage() for r in caplog.records]
    assert (
        warning.startswith("column 'price' holds int64 in the Parquet output")
        and "2 value" in warning
    )


def test_parquet_nulls_are_fields_not_given(tmp_path: Path) -> None:
    rows = [{**ROWS[0], "note": "first"}, {**ROWS[1], "context": None, "note": None}]
    data = write_dataset(tmp_path / "rows.parquet", rows)
    assert "context" not in dict(read_rows(data))[2]  # type: ignore[arg-type]
    run_file(data, tmp_path / "out.jsonl")
    second = list(iter_output_lines(tmp_path / "out.jsonl"))[1]
    assert "output_relevance" in second and "completeness" not in second
    # A carried column keeps its null, as from JSONL (it was dropped from Parquet only).
    assert second["note"] is None
    from_jsonl = tmp_path / "from_jsonl.jsonl"
    run_file(write_dataset(tmp_path / "rows.jsonl", rows), from_jsonl)
    assert list(iter_output_lines(from_jsonl))[1]["note"] is None
    # And from CSV, where an empty cell is the null (the key was dropped).
    from_csv = tmp_path / "from_csv.jsonl"
    run_file(write_dataset(tmp_path / "rows.csv", rows), from_csv)
    assert list(iter_output_lines(from_csv))[1]["note"] is None


def test_a_json_null_text_is_a_field_not_given_as_a_csv_blank_is(tmp_path: Path) -> None:
    # It was "generated_text: must be a string" from JSONL, "is required" from CSV.
    jsonl, csv_file = tmp_path / "rows.jsonl", tmp_path / "rows.csv"
    jsonl.write_text(
        '{"id": "a", "user_query": "What is 2+2?", "generated_text": null}\n', encoding="utf-8"
    )
    csv_file.write_text("id,user_query,generated_text\na,What is 2+2?,\n", encoding="utf-8")
    messages = []
    for data in (jsonl, csv_file):
        out = tmp_path / f"out-{data.suffix[1:]}.jsonl"
        run_file(data, out)
        first = list(iter_output_lines(out))[0]
        assert first["error"]["field"] == "generated_text", first
        messages.append(first["error"]["message"])
    assert messages[0] == messages[1] and "is required" in messages[0]


def test_column_map_reads_differently_named_columns(tmp_path: Path) -> None:
    renamed = [
        {
            "id": r["id"],
            "question": r["user_query"],
            "docs": r["context"],
            "answer": r["generated_text"],
        }
        for r in ROWS
    ]
    data = write_dataset(tmp_path / "renamed.jsonl", renamed)
    result = subprocess.run(
        [
            *WITH_TEST_JUDGES,
            "run",
            str(data),
            "--map",
            "user_query=question",
            "--map",
            "context=docs",
            "--map",
            "generated_text=answer",
            "--out",
            str(tmp_path / "mapped.jsonl"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    plain = tmp_path / "plain.jsonl"
    run_file(write_dataset(tmp_path / "rows.jsonl", ROWS), plain, explain=True)
    assert (tmp_path / "mapped.jsonl").read_text() == plain.read_text()


def test_a_bad_csv_row_keeps_its_id_and_carried_columns(tmp_path: Path) -> None:
    data = tmp_path / "rows.csv"
    # A config cell naming a key twice is refused as a JSONL row's or a server body's is (the
    # last copy was kept in silence).
    twice = '"{""output_relevance"": {""explain"": true, ""explain"": false}}"'
    data.write_text(
        "id,team,user_query,generated_text,config\n"
        'a,red,Returns?,Returns are accepted within 30 days.,"{not json}"\n'
        "b,blue,Refunds?,Refunds take five days.,,extra cell\n"
        "c,green,Shipping?,Shipping is free.,\n"
        f"d,pink,Fees?,There are no fees.,{twice}\n",
        encoding="utf-8",
    )
    out = tmp_path / "out.jsonl"
    run_file(data, out, detectors=["output_relevance"])
    bad_config, extra_cell, good, repeated = iter_output_lines(out)
    assert (bad_config["id"], bad_config["team"]) == ("a", "red")
    assert bad_config["error"]["field"] == "config"
    assert repeated["error"]["field"] == "config"
    assert repeated["error"]["message"] == "the key 'explain' appears more than once"
    assert (extra_cell["id"], extra_cell["team"]) == ("b", "blue")
    assert "more cells than the header" in extra_cell["error"]["message"]
    assert "error" not in good


def test_a_csv_row_that_is_not_utf8_keeps_its_mapped_id(tmp_path: Path) -> None:
    # The mapping skipped such a row: its line had "qid", not "id", and JUnit named it "row 3".
    data = tmp_path / "rows.csv"
    data.write_bytes(
        b"qid,question,answer\n1,Who wrote Hamlet?,Shakespeare wrote it.\n3,Caf\xe9?,Yes\n"
    )
    out = tmp_path / "out.jsonl"
    mapping = (("id", "qid"), ("user_query", "question"), ("generated_text", "answer"))
    scorer = DetectorScorer(detectors=("output_relevance",), column_map=mapping)
    run_file(data, out, scorer=scorer)
    good, bad = iter_output_lines(out)
    assert good["id"] == "1" and "error" not in good
    assert bad["id"] == "3" and "qid" not in bad and "question" not in bad
    assert bad["error"] == {
        "field": "question",  # the file's column, where the bad bytes are
        "kind": "invalid_row",
        "message": "is not valid UTF-8 text",
    }


def test_a_csv_header_naming_a_column_twice_stops_the_run(tmp_path: Path) -> None:
    # The reader kept the second answer and dropped the first in silence.
    data = tmp_path / "rows.csv"
    data.write_text("id,user_query,generated_text,generated_text\n1,Q?,a1,a2\n", encoding="utf-8")
    result = assay_run(str(data), "--out", str(tmp_path / "out.jsonl"))
    assert result.returncode == 2
    assert "the header names 'generated_text' more than once" in result.stderr
    assert not (tmp_path / "out.jsonl").exists()


def test_a_jsonl_row_naming_a_key_twice_is_refused_and_the_rest_scored(tmp_path: Path) -> None:
    data = tmp_path / "rows.jsonl"
    twice = '{"id": "k", "user_query": "Q?", "generated_text": "one", "generated_text": "two"}'
    data.write_text(twice + "\n" + json.dumps(ROWS[0]) + "\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    run_file(data, out, detectors=["output_relevance"])
    refused, scored = iter_output_lines(out)
    assert refused["id"] == "k"
    assert refused["error"]["message"] == "line 1: the key 'generated_text' appears more than once"
    assert "error" not in scored


def test_bad_column_map_names_the_option(tmp_path: Path) -> None:
    data = write_dataset(tmp_path / "rows.jsonl", ROWS)
    result = assay_run(str(data), "--map", "generated_text")
    assert result.returncode == 2
    assert "--map" in result.stderr and "FIELD=COLUMN" in result.stderr


def test_a_semicolon_separated_csv_is_named_as_such(tmp_path: Path) -> None:
    data = tmp_path / "rows.csv"
    data.write_text("user_query;generated_text\nWhat is 2+2?;Four.\n", encoding="utf-8")
    result = assay_run(str(data), "--out", str(tmp_path / "out.jsonl"))
    assert result.returncode == 2
    assert "rows.csv looks separated by semicolons, not commas" in result.stderr
    assert "--map" not in result.stderr


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("empty.jsonl", ""),
        ("blank.jsonl", "\n \n"),
        ("bom.jsonl", "\ufeff\n"),  # a byte-order mark alone is no row either
        ("empty.csv", ""),
        ("header.csv", "user_query,generated_text\n"),
    ],
)
def test_an_input_without_rows_is_unusable(tmp_path: Path, name: str, text: str) -> None:
    data = tmp_path / name
    data.write_text(text, encoding="utf-8")
    result = assay_run(str(data), "--out", str(tmp_path / "out.jsonl"))
    assert result.returncode == 2
    assert result.stderr.strip() == f"error: FILE: {data} holds no rows to score"
    assert not (tmp_path / "out.jsonl").exists()


def test_summary_has_interval_histogram_and_errors_by_kind(tmp_path: Path) -> None:
    rows = [*ROWS, {"id": "bad", "generated_text": ["not", "text"]}]
    summary = run_file(write_dataset(tmp_path / "rows.jsonl", rows), tmp_path / "out.jsonl")
    written = json.loads((tmp_path / "out.jsonl.summary.json").read_text())
    relevance = written["detectors"]["output_relevance"]
    low, high = relevance["mean_score_ci95"]
    assert low <= relevance["mean_score"] <= high
    assert sum(relevance["score_histogram"].values()) == relevance["rows_scored"] == 3
    assert written["failures_by_kind"] == {"invalid_row": 1}
    assert summary.failures[0]["id"] == "bad"


#: Peak resident memory allowed for scoring 200,000 rows with the light judge.
MEMORY_BOUND_MIB = 400


def peak_rss_mib(data: Path, out: Path) -> float:
    result = subprocess.run(
        [
            *WITH_TEST_JUDGES,
            "run",
            str(data),
            "--judge",
            "light",
            "--detector",
            "output_relevance",
            "--batch-size",
            "500",
            "--stream-batch-size",
            "5000",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=1800,
        env={**os.environ, "ASSAY_TEST_REPORT_RSS": "1"},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    marker = [line for line in result.stderr.splitlines() if line.startswith("max_rss_kib=")]
    return int(marker[-1].split("=")[1]) / 1024


def test_200k_rows_stay_within_a_memory_bound(tmp_path: Path) -> None:
    with (tmp_path / "big.jsonl").open("w", encoding="utf-8") as handle:
        for n in range(200_000):
            row = {
                "id": n,
                "user_query": f"What is the status of order {n}?",
                "generated_text": f"Order {n} shipped on day {n % 28 + 1} and arrives soon.",
            }
            handle.write(json.dumps(row) + "\n")
    with (tmp_path / "small.jsonl").open("w", encoding="utf-8") as handle:
        handle.writelines(
            line for n, line in enumerate((tmp_path / "big.jsonl").open()) if n < 20_000
        )

    small = peak_rss_mib(tmp_path / "small.jsonl", tmp_path / "small.out.parquet")
    big = peak_rss_mib(tmp_path / "big.jsonl", tmp_path / "big.out.parquet")

    assert big < MEMORY_BOUND_MIB, f"peak {big:.0f} MiB"
    # Ten times the rows, (almost) the same memory: nothing grows with the input.
    assert big - small < 40, f"peak {small:.0f} MiB for 20,000 rows, {big:.0f} MiB for 200,000"
    out = pq.ParquetFile(tmp_path / "big.out.parquet")
    assert out.metadata.num_rows == 200_000
    summary = json.loads((tmp_path / "big.out.parquet.summary.json").read_text())
    assert summary["detectors"]["output_relevance"]["rows_scored"] == 200_000


def test_run_gates_exit_1_below_threshold_and_write_junit(tmp_path: Path) -> None:
    data = write_dataset(tmp_path / "rows.jsonl", ROWS)
    out, junit = tmp_path / "out.jsonl", tmp_path / "junit.xml"
    command = [*WITH_TEST_JUDGES, "run", str(data), "--out", str(out), "--junit", str(junit)]

    passing = subprocess.run(
        [*command, "--fail-under", "output_relevance=0.1"], capture_output=True, text=True
    )
    failing = subprocess.run(
        [*command, "--fail-under", "output_relevance=0.99"], capture_output=True, text=True
    )
    suite = junit.read_text()
    bad = subprocess.run([*command, "--fail-under", "toxicity=0.5"], capture_output=True, text=True)

    assert passing.returncode == 0, passing.stderr
    assert failing.returncode == 1
    assert "output_relevance: mean score" in failing.stderr and "below" in failing.stderr
    assert bad.returncode == 2 and "'toxicity' is not among the scorers here" in bad.stderr
    assert not junit.exists()  # the failing run's file went as the bad command started
    # A case per row and one for the gate, which is the one failure: the file and the exit
    # code agree.
    assert suite.count("<testcase") == 4 and suite.count("<failure") == 1
    assert 'name="--fail-under output_relevance=0.99"' in suite

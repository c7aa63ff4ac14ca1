"""The local runner: rows in, one scored line per row out (in order), bad rows reported per row,
a summary that matches the lines."""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path
from statistics import mean
from typing import Any

import pytest

from assay.judges import Judge, Question, Verdict, get_judge, register_judge
from assay.runner import read_rows, run_file
from assay.runner.rows import DetectorScorer
from assay.runner.summary import PASS_THRESHOLD
from assay.schema import JudgeFailure, RequestValidationError

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "rag_rows.jsonl"

EGGS: dict[str, Any] = {
    "user_query": "How long should I boil eggs for a soft yolk?",
    "context": ["Lower cold eggs into boiling water and cook them for 6 minutes for a runny yolk."],
    "generated_text": "Boil the eggs for 6 minutes for a soft, runny yolk.",
}
VPN: dict[str, Any] = {
    "user_query": "How do I connect to the office VPN?",
    "context": ["Install the SecureLink client and sign in with your work email."],
    "generated_text": "Install SecureLink and sign in with your work email address.",
}


@pytest.fixture(autouse=True)
def _embedded_judge_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ASSAY_JUDGE", raising=False)


def write_jsonl(path: Path, rows: Sequence[dict[str, Any] | str]) -> Path:
    lines = [row if isinstance(row, str) else json.dumps(row) for row in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def read_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_run_file_never_replaces_a_file_no_run_wrote_unless_restarted(tmp_path: Path) -> None:
    # `assay run` refused such an output; run_file replaced a 200-row dataset with 1 scored row.
    data = write_jsonl(tmp_path / "rows.jsonl", [{"id": "eggs", **EGGS}])
    dataset = write_jsonl(tmp_path / "dataset.jsonl", [{"id": "keep me", **VPN}])
    before = dataset.read_bytes()
    with pytest.raises(RequestValidationError, match="exists but is no Assay run's output"):
        run_file(data, dataset)
    assert dataset.read_bytes() == before
    # A run's own output is still scored again, and an explicit restart replaces the file.
    out = tmp_path / "out.jsonl"
    assert run_file(data, out).rows == run_file(data, out).rows == 1
    assert run_file(data, dataset, restart=True).rows == 1
    assert read_lines(dataset)[0]["id"] == "eggs"


def test_jsonl_rows_come_out_one_line_each_in_order_with_ids(tmp_path: Path) -> None:
    data = write_jsonl(
        tmp_path / "rows.jsonl",
        [
            {"id": "eggs", **EGGS, "note": "kept"},
            {"id": 7, "user_query": VPN["user_query"], "generated_text": VPN["generated_text"]},
            {
                "id": "vpn-context",
                "context": VPN["context"],
                "generated_text": VPN["generated_text"],
            },
        ],
    )

    summary = run_file(data, batch_size=2)

    lines = read_lines(tmp_path / "rows.scored.jsonl")
    assert [line["row"] for line in lines] == [1, 2, 3]
    assert [line["id"] for line in lines] == ["eggs", 7, "vpn-context"]
    assert lines[0]["note"] == "kept"  # other columns pass through
    # The text each row was scored on comes along, so reports can show it.
    assert {k: lines[0][k] for k in ("user_query", "context", "generated_text")} == EGGS
    assert lines[1]["generated_text"] == VPN["generated_text"] and "context" not in lines[1]
    assert lines[2]["context"] == VPN["context"] and "user_query" not in lines[2]
    text = {"user_query", "context", "generated_text"}
    assert set(lines[0]) == {"row", "id", "note", "output_relevance", "completeness"} | text
    assert set(lines[1]) == {"row", "id", "user_query", "generated_text", "output_relevance"}
    assert set(lines[2]) == {"row", "id", "context", "generated_text", "completeness"}
    assert summary.rows == 3 and summary.rows_failed == 0
    assert summary.detectors["output_relevance"].rows_scored == 2
    assert summary.detectors["completeness"].rows_scored == 2


def test_csv_rows_are_scored_like_jsonl(tmp_path: Path) -> None:
    data = tmp_path / "rows.csv"
    with data.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, ["id", "user_query", "context", "generated_text"])
        writer.writeheader()
        writer.writerow({**EGGS, "id": "eggs", "context": json.dumps(EGGS["context"])})
        writer.writerow({**VPN, "id": "vpn", "context": VPN["context"][0]})
        writer.writerow(
            {"id": "no-answer", "user_query": "Why?", "context": "", "generated_text": ""}
        )
    out = tmp_path / "scored" / "out.jsonl"

    summary = run_file(data, out)

    lines = read_lines(out)
    assert [(line["row"], line["id"]) for line in lines] == [
        (1, "eggs"),
        (2, "vpn"),
        (3, "no-answer"),
    ]
    assert {"output_relevance", "completeness"} <= set(lines[0])
    assert {"output_relevance", "completeness"} <= set(lines[1])
    assert lines[2]["error"]["field"] == "generated_text"
    assert summary.rows_failed == 1
    assert (tmp_path / "scored" / "out.jsonl.summary.json").is_file()


def test_run_file_takes_paths_as_strings_too(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "rows.jsonl", [EGGS])
    summary = run_file(str(data), str(tmp_path / "out.jsonl"), detectors=["output_relevance"])
    assert summary.rows == 1 and summary.output_path == str(tmp_path / "out.jsonl")
    assert (tmp_path / "out.jsonl").is_file()


def write_csv(path: Path, *rows: Sequence[str]) -> Path:
    """A CSV file of `rows`, the first being the header."""
    with path.open("w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows(rows)
    return path


def test_csv_context_cell_holding_a_json_list_is_a_list(tmp_path: Path) -> None:
    data = write_csv(
        tmp_path / "rows.csv",
        ["id", "context", "generated_text", "config"],
        ["list", '["first doc", "second, with comma"]', "answer", ""],
        ["text", "just one document", "answer", ""],
        ["bracket", "[not json", "answer", '{"completeness": {"explain": true}}'],
        ["object", '{"a": 1}', "answer", ""],
        ["years", "[2020, 2021]", "answer", ""],
    )

    rows = dict(read_rows(data))

    assert rows[1] == {
        "id": "list",
        "context": ["first doc", "second, with comma"],
        "generated_text": "answer",
    }
    assert rows[2] == {"id": "text", "context": "just one document", "generated_text": "answer"}
    assert rows[3] == {
        "id": "bracket",
        "context": "[not json",
        "generated_text": "answer",
        "config": {"completeness": {"explain": True}},
    }
    assert rows[4] == {"id": "object", "context": '{"a": 1}', "generated_text": "answer"}
    # A JSON list of anything but strings is not a list of documents: it stays one text.
    assert rows[5] == {"id": "years", "context": "[2020, 2021]", "generated_text": "answer"}


def test_bad_rows_are_reported_in_place_and_the_rest_are_scored(tmp_path: Path) -> None:
    data = write_jsonl(
        tmp_path / "rows.jsonl",
        [
            {"id": "ok-1", **EGGS},
            '{"id": "broken", "generated_text": ',
            {"id": "no-text", "user_query": "Anything?"},
            {"id": "wrong-type", "user_query": "Anything?", "generated_text": 42},
            {"id": "bad-detector", **VPN, "config": {"toxicity": {}}},
            "[1, 2, 3]",
            {"id": "ok-2", **VPN},
            # A query that is no text: named (it read "no detector applies"), in both places.
            {"id": "number-query", "user_query": 5, "generated_text": "Five."},
            {"id": "number-context", **VPN, "context": [1, 2]},
        ],
    )

    summary = run_file(data, batch_size=3)

    lines = read_lines(tmp_path / "rows.scored.jsonl")
    assert [line["row"] for line in lines] == [1, 2, 3, 4, 5, 6, 7, 8, 9]
    errors = {line["row"]: line["error"] for line in lines if "error" in line}
    assert set(errors) == {2, 3, 4, 5, 6, 8, 9}
    assert (errors[8]["field"], errors[8]["message"]) == ("user_query", "must be a string")
    assert errors[9]["field"].startswith("context")
    assert errors[2]["field"] == "row" and "line 2" in errors[2]["message"]
    assert "JSON" in errors[2]["message"]
    assert errors[3] == {
        "field": "generated_text",
        "kind": "invalid_row",
        "message": "is required",
    }
    assert summary.failures_by_kind == {"invalid_row": 7}
    assert errors[4]["field"] == "generated_text"
    assert errors[5]["field"] == "config.toxicity"
    assert "unknown detector" in errors[5]["message"]
    assert errors[6]["field"] == "row"
    assert lines[2]["id"] == "no-text" and "id" not in lines[1]
    for scored in (lines[0], lines[6]):
        assert 0.0 <= scored["output_relevance"]["score"] <= 1.0
        assert 0.0 <= scored["completeness"]["score"] <= 1.0
    assert summary.rows == 9 and summary.rows_failed == 7
    assert [failure["row"] for failure in summary.failures] == [2, 3, 4, 5, 6, 8, 9]


def test_summary_numbers_match_the_output_lines(tmp_path: Path) -> None:
    out = tmp_path / "scored.jsonl"

    summary = run_file(EXAMPLES, out, batch_size=4)

    lines = read_lines(out)
    written = json.loads((tmp_path / "scored.jsonl.summary.json").read_text(encoding="utf-8"))
    assert written == summary.to_dict()
    assert written["rows"] == len(lines) == 20
    for name in ("output_relevance", "completeness"):
        scores = [line[name]["score"] for line in lines if name in line]
        numbers = written["detectors"][name]
        assert numbers["rows_scored"] == len(scores) == 20
        assert numbers["rows_errored"] == 0
        assert numbers["mean_score"] == pytest.approx(mean(scores), abs=1e-4)
        passing = sum(score >= PASS_THRESHOLD for score in scores) / len(scores)
        assert numbers["share_passing"] == pytest.approx(passing, abs=1e-4)
        first_instruction = [line[name]["instructions_list"][0]["label"] for line in lines]
        rates = list(numbers["instruction_pass_rates"].values())
        assert rates[0] == pytest.approx(mean(first_instruction), abs=1e-4)
        assert len(rates) == len(lines[0][name]["instructions_list"])


class _FailsOnMarker(Judge):
    """Fault injection: fails every question about a response containing FAIL; the real
    embedded judge answers the rest."""

    name = "fails-on-marker"

    async def answer(self, questions: Sequence[Question]) -> list[Verdict | JudgeFailure]:
        real = await get_judge("embedded").answer(questions)
        return [
            JudgeFailure("timeout", "injected") if "FAIL" in q.generated_text else verdict
            for q, verdict in zip(questions, real, strict=True)
        ]


def test_judge_failures_are_errors_in_the_summary_not_zero_scores(tmp_path: Path) -> None:
    register_judge("fails-on-marker", _FailsOnMarker)
    data = write_jsonl(
        tmp_path / "rows.jsonl",
        [
            {"id": "a", **EGGS},
            {"id": "b", **EGGS, "generated_text": "FAIL " + EGGS["generated_text"]},
            {"id": "c", **VPN},
        ],
    )

    summary = run_file(data, judge="fails-on-marker")

    lines = read_lines(tmp_path / "rows.scored.jsonl")
    assert lines[1]["output_relevance"] == {"error": True, "kind": "timeout", "message": "injected"}
    relevance = summary.detectors["output_relevance"]
    assert relevance.rows_errored == 1 and relevance.rows_scored == 2
    expected = mean([lines[0]["output_relevance"]["score"], lines[2]["output_relevance"]["score"]])
    assert relevance.mean_score == pytest.approx(expected, abs=1e-4)
    assert summary.rows_failed == 0  # the row was valid; only its scoring failed


class _CountingJudge(Judge):
    """Delegates to the embedded judge and records how many items each call covered."""

    name = "counting"

    def __init__(self) -> None:
        self.items_per_call: list[int] = []

    async def answer(self, questions: Sequence[Question]) -> list[Verdict | JudgeFailure]:
        self.items_per_call.append(len({q.generated_text for q in questions}))
        return await get_judge("embedded").answer(questions)


def test_rows_reach_the_judge_one_batch_per_call_and_progress_is_reported(
    tmp_path: Path,
) -> None:
    counting = _CountingJudge()
    register_judge("counting", lambda: counting)
    rows = [
        {"id": n, **EGGS, "generated_text": f"Answer {n}: boil for 6 minutes."} for n in range(5)
    ]
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    progress: list[int] = []

    run_file(data, judge="counting", batch_size=2, on_progress=progress.append)

    assert counting.items_per_call == [2, 2, 1]
    assert progress == [0, 2, 4, 5]


def test_named_detectors_are_the_only_ones_run(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "rows.jsonl", [{"id": 1, **EGGS}, {"id": 2, **VPN}])

    summary = run_file(data, detectors=["completeness"], explain=True)

    lines = read_lines(tmp_path / "rows.scored.jsonl")
    text = {"row", "id", "user_query", "context", "generated_text"}
    assert [sorted(set(line) - text) for line in lines] == [["completeness"]] * 2
    assert all(e["explanation"] for e in lines[0]["completeness"]["instructions_list"])
    assert list(summary.detectors) == ["completeness"]


def test_explain_false_turns_explanations_off_even_where_a_row_asks_for_them(
    tmp_path: Path,
) -> None:
    asking = {"output_relevance": {"explain": True}}
    data = write_jsonl(tmp_path / "rows.jsonl", [{"id": 1, **EGGS, "config": asking}])

    run_file(data, tmp_path / "off.jsonl", explain=False)
    run_file(data, tmp_path / "as-asked.jsonl", explain=None)

    [off] = read_lines(tmp_path / "off.jsonl")
    [as_asked] = read_lines(tmp_path / "as-asked.jsonl")
    assert [e["explanation"] for e in off["output_relevance"]["instructions_list"]] == [""] * 4
    assert all(e["explanation"] for e in as_asked["output_relevance"]["instructions_list"])


@pytest.mark.parametrize(
    ("name", "options", "field"),
    [
        ("missing.jsonl", {}, "FILE"),
        ("rows.txt", {}, "FILE"),
        ("rows.jsonl", {"detectors": ["toxicity"]}, "detector"),
        ("rows.jsonl", {"judge": "no-such-judge"}, "judge"),
    ],
)
def test_unusable_input_raises_before_writing_anything(
    tmp_path: Path, name: str, options: dict[str, Any], field: str
) -> None:
    if name != "missing.jsonl":
        (tmp_path / name).write_text(json.dumps({"id": 1, **EGGS}) + "\n", encoding="utf-8")

    with pytest.raises(RequestValidationError) as raised:
        run_file(tmp_path / name, **options)

    assert raised.value.field == field
    assert not list(tmp_path.glob("*.scored.jsonl*"))


def test_off_topic_and_incomplete_examples_score_lower_than_good_examples(tmp_path: Path) -> None:
    run_file(EXAMPLES, tmp_path / "scored.jsonl")

    lines = read_lines(tmp_path / "scored.jsonl")
    by_note: dict[str, list[dict[str, Any]]] = {}
    for line in lines:
        by_note.setdefault(line["note"], []).append(line)
    assert {note: len(group) for note, group in by_note.items()} == {
        "good": 8,
        "off_topic": 5,
        "incomplete": 5,
        "contradicts_context": 2,
    }

    def mean_score(note: str, detector: str) -> float:
        return float(mean(line[detector]["score"] for line in by_note[note]))

    assert mean_score("off_topic", "output_relevance") < mean_score("good", "output_relevance")
    assert mean_score("incomplete", "completeness") < mean_score("good", "completeness")


def test_summary_counts_the_embedding_cache_of_this_run(tmp_path: Path) -> None:
    first = run_file(EXAMPLES, tmp_path / "first.jsonl", batch_size=4)
    again = run_file(EXAMPLES, tmp_path / "again.jsonl", batch_size=4)

    assert first.embedding_cache.lookups > 0
    # Every text of the second run was encoded for the first: all hits, nothing encoded.
    assert again.embedding_cache.misses == 0
    assert again.embedding_cache.hits == first.embedding_cache.lookups
    written = json.loads((tmp_path / "again.jsonl.summary.json").read_text(encoding="utf-8"))
    assert written["embedding_cache"] == {
        "hits": again.embedding_cache.hits,
        "misses": 0,
        "hit_rate": 1.0,
    }
    assert read_lines(tmp_path / "again.jsonl") == read_lines(tmp_path / "first.jsonl")


def test_mapped_csv_columns_are_read_as_the_json_fields_they_become(tmp_path: Path) -> None:
    # `--map context=docs` judged the JSON text as one document, and `--map config=cfg`
    # rejected every row ("must be a JSON object"): cells were decoded by the file's names.
    data = write_csv(
        tmp_path / "rows.csv",
        ["question", "answer", "docs", "cfg"],
        ["2+2?", "Four.", '["2+2 is 4", "math"]', '{"completeness": {}}'],
    )
    column_map = {"user_query": "question", "context": "docs", "config": "cfg"}
    [(_, fields)] = read_rows(data, column_map)
    assert fields["docs"] == ["2+2 is 4", "math"] and fields["cfg"] == {"completeness": {}}
    out = tmp_path / "out.jsonl"
    pairs = (*column_map.items(), ("generated_text", "answer"))
    summary = run_file(data, out, scorer=DetectorScorer(None, True, "embedded", pairs))
    assert summary.rows_failed == 0, summary.failures
    [line] = [json.loads(x) for x in out.read_text().splitlines()]
    assert line["context"] == ["2+2 is 4", "math"] and set(line) >= {"completeness"}
    assert "output_relevance" not in line  # the row's own config chose the detector


def test_a_jsonl_file_is_refused_for_its_columns_only_when_no_row_has_them(tmp_path: Path) -> None:
    from assay.runner.columns import SAMPLE_ROWS, check_detector_columns

    # The first SAMPLE_ROWS rows lack an answer: the sample refused the whole file, though its
    # last row can be scored (the same rows as CSV ran).
    question = {"user_query": EGGS["user_query"]}
    late = write_jsonl(tmp_path / "late.jsonl", [question] * SAMPLE_ROWS + [EGGS])
    check_detector_columns(late, [], None)
    never = write_jsonl(tmp_path / "never.jsonl", [question] * (SAMPLE_ROWS + 1))
    with pytest.raises(RequestValidationError, match="no row of never.jsonl can be scored"):
        check_detector_columns(never, [], None)

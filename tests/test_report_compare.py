"""Comparing two runs (`assay report BASELINE CANDIDATE`) and showing the text behind scores:
paired changes with bootstrap intervals, flipped rows with both runs' text, the terminal, JSON
and HTML views (the page in Debian's headless Chromium), and the --fail-on-regression gate."""

from __future__ import annotations

import json
import subprocess
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from assay import stats
from assay.report import compare
from assay.runner.output import iter_output_lines
from assay.schema import RequestValidationError
from published_instructions import OUTPUT_RELEVANCE
from test_cli import _assay as assay

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "rag_rows.jsonl"
CHROMIUM = "/usr/bin/chromium"
OFF_TOPIC = "The weather is mild today and our office dog is called Biscuit."


def line(row: int, score: float, row_id: str | None = None, **text: Any) -> dict[str, Any]:
    """An output line whose output_relevance follows the first round(score * 4) instructions."""
    followed = round(score * 4)
    entries = [
        {
            "explanation": f"why {n}",
            "follow_probability": 0.9 if n < followed else 0.1,
            "instruction": instruction,
            "label": n < followed,
        }
        for n, instruction in enumerate(OUTPUT_RELEVANCE)
    ]
    result = {"row": row, **({"id": row_id} if row_id else {}), **text}
    result["output_relevance"] = {"instructions_list": entries, "score": followed / 4}
    return result


def test_changes_are_paired_differences_with_a_paired_bootstrap_interval() -> None:
    baseline_scores = [1.0, 0.75, 0.5, 1.0, 0.25, 0.75]
    candidate_scores = [0.75, 0.75, 0.25, 0.5, 0.25, 0.5]
    baseline = [line(n, s, f"q{n}") for n, s in enumerate(baseline_scores, start=1)]
    # The candidate lists its rows in another order: they pair by id, not position.
    candidate = [line(7 - n, s, f"q{n}") for n, s in enumerate(candidate_scores, start=1)]

    result = compare(baseline, candidate, ("a.jsonl", "b.jsonl"))

    [change] = result.scorers
    assert result.paired_by == "id" and change.pairs == 6
    pairs = zip(baseline_scores, candidate_scores, strict=True)
    differences = Counter(round(b - a, 4) for a, b in pairs)
    assert change.change is not None
    assert change.change.delta == pytest.approx(
        sum(candidate_scores) / 6 - sum(baseline_scores) / 6
    )
    assert change.change.interval == stats.mean_interval(differences)
    assert change.change.significant_drop  # every pair fell or stayed: the interval is below 0
    # Pass mark 0.7: q4 (1 -> 0.5) and q6 (0.75 -> 0.5) went from pass to fail; q1 fell but
    # still passes; none improved.
    assert change.regressed == 2 and change.improved == 0
    assert [flip.key for flip in change.regressed_rows] == ["q4", "q6"]
    core = change.instructions[0]
    assert core.instruction == OUTPUT_RELEVANCE[0] and core.pairs == 6


def test_rows_without_ids_pair_by_row_number_and_unpaired_rows_are_counted() -> None:
    baseline = [line(1, 1.0), line(2, 1.0), line(3, 0.5)]
    candidate = [line(1, 1.0), line(2, 0.25)]

    result = compare(baseline, candidate, ("a", "b"), thresholds={"output_relevance": 0.9})

    assert result.paired_by == "row"
    assert (result.only_baseline, result.only_candidate) == (1, 0)
    [change] = result.scorers
    assert change.pass_mark == 0.9 and change.regressed == 1


def test_for_an_error_rate_a_row_passes_at_or_below_the_mark_and_rising_is_a_regression() -> None:
    def rate(row: int, score: float) -> dict[str, Any]:
        result = {"score": score, "score_range": [0, 100], "inverted": True}
        return {"row": row, "m": {**result, "instructions_list": []}}

    # Error rates on 0-100: a row passes at 30 or less (0.7 of the way from the worst end).
    baseline = [rate(1, 10), rate(2, 50), rate(3, 30), rate(4, 60)]
    candidate = [rate(1, 40), rate(2, 20), rate(3, 30), rate(4, 70)]

    [change] = compare(baseline, candidate, ("a", "b")).scorers

    assert change.pass_mark == 30
    assert (change.regressed, change.improved) == (1, 1)
    assert [f.row for f in change.regressed_rows] == [1]
    assert [f.row for f in change.improved_rows] == [2]


def test_rows_and_scorers_the_candidate_lost_are_regressions() -> None:
    def both(row: int, score: float) -> dict[str, Any]:
        entry = line(row, score, f"q{row}")
        entry["completeness"] = {"instructions_list": [], "score": score}
        return entry

    baseline = [both(n, 1.0) for n in range(1, 5)]
    # Row 2 rejected in the new run, and completeness left out of every row: both passed the
    # gate unmentioned, as only what the candidate has was compared.
    candidate = [line(1, 1.0, "q1"), {"row": 2, "id": "q2", "error": {"kind": "invalid_row"}}]
    candidate += [line(n, 1.0, f"q{n}") for n in (3, 4)]

    result = compare(baseline, candidate, ("a", "b"))

    changes = {s.name: s for s in result.scorers}
    assert (changes["output_relevance"].pairs, changes["output_relevance"].lost) == (3, 1)
    assert (changes["completeness"].pairs, changes["completeness"].lost) == (0, 4)
    messages = {message.split(":", 1)[0]: message for message in result.regressions()}
    assert "output_relevance: 1 rows scored in a have no score in b" in messages["output_relevance"]
    assert messages["completeness"].startswith("completeness: no row is scored in both a and b")


def test_candidate_rows_without_ids_are_named_not_called_repeats() -> None:
    baseline = [line(n, 1.0, f"q{n}") for n in range(1, 4)]
    candidate = [line(n, 1.0) for n in range(1, 4)]

    result = compare(baseline, candidate, ("a", "b"))

    assert (result.repeated_ids, result.missing_ids, result.only_candidate) == (0, 3, 0)
    assert result.pairing_problem == (
        "3 rows of b have no id, but the baseline's rows are paired by id; give them the "
        "baseline's ids; 3 rows of a have no partner in b, so nothing says whether they got "
        "worse"
    )


def test_baseline_rows_the_candidate_dropped_are_a_pairing_problem() -> None:
    # A new run that left out its worst rows passed --fail-on-regression.
    baseline = [line(n, 1.0, f"q{n}") for n in range(1, 4)]

    result = compare(baseline, baseline[:2], ("a", "b"))

    assert result.only_baseline == 1
    assert result.pairing_problem == (
        "1 rows of a have no partner in b, so nothing says whether they got worse"
    )


def test_a_baseline_that_is_no_run_output_is_named() -> None:
    inputs = [{"user_query": "q", "generated_text": "a"}]
    with pytest.raises(RequestValidationError) as caught:
        compare(inputs, [line(1, 1.0)], ("rows.jsonl", "b"))
    assert caught.value.field == "baseline"
    assert "line 1 of rows.jsonl has no row number: is it an input file?" in caught.value.message


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The example rows scored by a real `assay run` on the embedded judge (the baseline), and
    again with every third answer replaced by an off-topic one (the candidate)."""
    folder = tmp_path_factory.mktemp("compare")
    rows = [json.loads(text) for text in EXAMPLES.read_text(encoding="utf-8").splitlines()]
    worse = [
        {**row, "generated_text": OFF_TOPIC} if n % 3 == 0 else row for n, row in enumerate(rows)
    ]
    outputs = []
    for name, data in (("baseline", rows), ("candidate", worse)):
        source = folder / f"{name}.jsonl"
        source.write_text("".join(json.dumps(row) + "\n" for row in data), encoding="utf-8")
        out = folder / f"{name}.scored.jsonl"
        result = assay("run", str(source), "--out", str(out), "-d", "output_relevance")
        assert result.returncode == 0, result.stderr
        outputs.append(out)
    return outputs[0], outputs[1]


def test_report_of_two_runs_prints_the_change_and_the_rows_that_went_from_pass_to_fail(
    runs: tuple[Path, Path], tmp_path: Path
) -> None:
    baseline, candidate = runs

    result = assay("report", str(baseline), str(candidate), "--html", str(tmp_path / "r.html"))
    same = assay(
        "report", str(candidate), "--baseline", str(baseline), "--html", str(tmp_path / "s.html")
    )

    assert result.returncode == 0, result.stderr
    assert f"change against {baseline}" in " ".join(result.stdout.split())
    assert "output_relevance: rows that went from pass to fail" in result.stdout
    assert f"after:  {OFF_TOPIC[:40]}" in result.stdout
    assert same.stdout.replace("s.html", "r.html") == result.stdout


def test_report_json_has_the_comparison_and_the_listed_rows_text(
    runs: tuple[Path, Path], tmp_path: Path
) -> None:
    baseline, candidate = runs

    result = assay(
        "report", str(baseline), str(candidate), "--json", "--html", str(tmp_path / "r.html")
    )

    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    [change] = data["comparison"]["scorers"]
    lines = {line["id"]: line for line in iter_output_lines(candidate)}
    before = {line["id"]: line for line in iter_output_lines(baseline)}
    differences = [
        lines[k]["output_relevance"]["score"] - before[k]["output_relevance"]["score"]
        for k in lines
    ]
    assert change["pairs"] == 20
    assert change["change"]["delta"] == pytest.approx(sum(differences) / 20)
    assert change["change"]["interval"]["low"] < change["change"]["delta"]
    for flip in change["regressed_rows"]:
        assert flip["candidate_text"]["generated_text"] == OFF_TOPIC
        assert flip["baseline_text"]["generated_text"] == before[flip["key"]]["generated_text"]
    # The report part lists the lowest rows with their text and every verdict.
    [scorer] = data["report"]["scorers"]
    lowest = scorer["lowest_rows"][0]
    assert lowest["text"]["generated_text"] == OFF_TOPIC
    assert len(lowest["verdicts"]) == 4 and all(v["explanation"] for v in lowest["verdicts"])


def test_fail_on_regression_exits_1_and_has_its_own_junit_case(
    runs: tuple[Path, Path], tmp_path: Path
) -> None:
    baseline, candidate = runs
    junit = tmp_path / "junit.xml"

    worse = assay(
        "report", str(baseline), str(candidate), "--fail-on-regression", "--junit", str(junit),
        "--html", str(tmp_path / "r.html"),
    )  # fmt: skip
    unchanged = assay(
        "report", str(baseline), str(baseline), "--fail-on-regression",
        "--html", str(tmp_path / "s.html"),
    )  # fmt: skip
    no_baseline = assay("report", str(candidate), "--fail-on-regression")

    assert worse.returncode == 1
    assert worse.stderr.startswith("error: output_relevance: mean score fell by")
    suite = ET.parse(junit).getroot()
    [gate] = [c for c in suite if c.get("name") == "--fail-on-regression output_relevance"]
    assert gate.find("failure") is not None and suite.get("failures") == "1"
    assert unchanged.returncode == 0, unchanged.stderr
    assert no_baseline.returncode == 2
    assert "--fail-on-regression: needs a baseline" in no_baseline.stderr


def test_the_page_shows_the_comparison_and_each_listed_rows_text_in_a_browser(
    runs: tuple[Path, Path], tmp_path: Path
) -> None:
    from playwright.sync_api import sync_playwright

    baseline, candidate = runs
    page_path = tmp_path / "report.html"
    assert assay("report", str(baseline), str(candidate), "--html", str(page_path)).returncode == 0
    before = {line["id"]: line for line in iter_output_lines(baseline)}
    after = {line["id"]: line for line in iter_output_lines(candidate)}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.goto(page_path.as_uri())
            row = page.locator('#comparison table.changes tr[data-scorer="output_relevance"]')
            delta = float(row.get_attribute("data-delta") or "nan")
            expected = sum(
                after[k]["output_relevance"]["score"] - before[k]["output_relevance"]["score"]
                for k in after
            ) / len(after)
            assert delta == pytest.approx(expected, abs=1e-4)
            flips = page.locator('.flips[data-direction="regressed"] details.flip')
            assert flips.count() == int(row.get_attribute("data-regressed") or -1) > 0
            first = flips.first
            assert not first.locator(".before").is_visible()  # folded until opened
            first.locator(":scope > summary").click()
            key = first.get_attribute("data-key") or ""
            assert before[key]["generated_text"] in first.locator(".before").inner_text()
            assert OFF_TOPIC in first.locator(".response").inner_text()
            assert first.locator("li.verdict").count() == 4

            # The lowest-scoring rows: query, response, context folded, every explanation.
            lowest = page.locator("#scorer-output_relevance tr.lowest-row").first
            number = int(lowest.get_attribute("data-row") or 0)
            source = next(line for line in after.values() if line["row"] == number)
            assert source["user_query"] in lowest.locator(".query").inner_text()
            assert source["generated_text"] in lowest.locator(".response").inner_text()
            context = lowest.locator("details.context")
            assert not context.locator("li").first.is_visible()
            context.locator("summary").click()
            assert context.locator("li").first.inner_text() == source["context"][0]
            verdicts = lowest.locator("li.verdict")
            assert verdicts.count() == 4
            explanations = [
                e["explanation"] for e in source["output_relevance"]["instructions_list"]
            ]
            for n, explanation in enumerate(explanations):
                assert explanation in verdicts.nth(n).inner_text()
            page.screenshot(path=str(tmp_path / "compare.png"), full_page=True)
        finally:
            browser.close()


def regression_gate(
    tmp_path: Path, baseline: list[dict[str, Any]], candidate: list[dict[str, Any]]
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """`assay report BASELINE CANDIDATE --fail-on-regression --junit`: its result and JUnit."""
    paths = {"base": baseline, "new": candidate}
    for name, rows in paths.items():
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    junit = tmp_path / "junit.xml"
    done = assay(
        "report", str(tmp_path / "base.jsonl"), str(tmp_path / "new.jsonl"),
        "--fail-on-regression", "--junit", str(junit), "--html", str(tmp_path / "r.html"),
    )  # fmt: skip
    return done, junit


def test_fail_on_regression_fails_when_no_rows_pair_up(tmp_path: Path) -> None:
    # Comparing against the wrong baseline evaluated no gate, and the job passed.
    baseline = [line(n, 1.0, f"a{n}") for n in (1, 2)]
    done, junit = regression_gate(tmp_path, baseline, [line(n, 0.5, f"b{n}") for n in (1, 2)])

    assert done.returncode == 1, done.stderr
    assert "error: no rows pair up between" in done.stderr
    assert "2 only in the baseline, 2 only in the output" in done.stderr
    assert "rows paired by id (none)" in done.stdout
    [gate] = [c for c in ET.parse(junit).getroot() if c.get("name") == "--fail-on-regression"]
    assert gate.find("failure") is not None
    # A candidate whose rows all carry one id: "1 only in the output" hid the 19 others.
    same = [line(n, 0.5, "same") for n in range(1, 21)]
    done, _ = regression_gate(tmp_path, baseline, same)
    assert "2 only in the baseline, 1 only in the output" in done.stderr
    assert "19 rows of" in done.stderr and "repeat an id" in done.stderr


def test_fail_on_regression_fails_when_candidate_rows_repeat_an_id(tmp_path: Path) -> None:
    # The candidate's second row with an id went unpaired as "only in the candidate", so a run
    # that added 2 off-topic answers under the baseline's ids passed the gate unchanged.
    baseline = [line(n, 1.0, f"q{n}") for n in (1, 2)]
    rows = [line(1, 1.0, "q1"), line(2, 1.0, "q2"), line(3, 0.0, "q1"), line(4, 0.0, "q2")]
    done, junit = regression_gate(tmp_path, baseline, rows)

    assert done.returncode == 1, done.stderr
    assert "2 rows of" in done.stderr and "repeat an id an earlier row of it has" in done.stderr
    assert "0 only in the baseline, 0 only in" in done.stdout
    [gate] = [c for c in ET.parse(junit).getroot() if c.get("name").endswith("pairing")]
    assert gate.find("failure") is not None


@pytest.mark.parametrize("target", ["output", "baseline", "html"])
def test_report_files_must_not_overwrite_the_runs_it_reads(tmp_path: Path, target: str) -> None:
    baseline, candidate = tmp_path / "base.jsonl", tmp_path / "new.jsonl"
    for path in (baseline, candidate):
        path.write_text(json.dumps(line(1, 1.0, "a1")) + "\n")
    html = tmp_path / "r.html"
    junit = {"output": candidate, "baseline": baseline, "html": html}[target]
    kept = {p: p.read_text() for p in (baseline, candidate)}

    done = assay(
        "report", str(baseline), str(candidate), "--html", str(html), "--junit", str(junit)
    )

    assert done.returncode == 2
    assert done.stderr.startswith("error: --junit: must not be")
    assert {p: p.read_text() for p in kept} == kept


def test_flipped_ood_rows_show_the_question_and_the_cases_it_got_wrong() -> None:
    # OOD lines have no user_query or generated_text: flips were listed with empty text.
    def ood(score: float, reply: str, label: str) -> dict[str, Any]:
        cases = [
            {"role": "in_domain", "kind": "in_domain", "query": "My balance?", "reply": "£42.",
             "label": "in_domain_answer", "correct": True},
            {"role": "probe", "kind": "far_domain", "query": "Bake bread?", "reply": reply,
             "label": label, "correct": label == "correct_refusal"},
        ]  # fmt: skip
        return {"row": 1, "id": "r1", "llm.ood_detection": {"score": score, "cases": cases}}

    result = compare(
        [ood(1.0, "I only help with banking.", "correct_refusal")],
        [ood(0.5, "Knead it well.", "missed_refusal")],
        ("a.jsonl", "b.jsonl"),
    )
    [change] = result.scorers
    [flip] = change.regressed_rows
    assert flip.candidate_text.user_query == "My balance?"
    assert flip.candidate_text.generated_text == (
        "far_domain missed_refusal: 'Bake bread?' -> 'Knead it well.'"
    )

"""`assay report` end to end: a real `assay run` on the embedded judge, then the report of its
output in the terminal, as an HTML file (opened in headless Chromium) and as CI gates."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from assay.report import collect
from assay.runner.output import iter_output_lines
from assay.stats import auroc
from test_cli import _assay as assay

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "rag_rows.jsonl"
SVG = "{http://www.w3.org/2000/svg}"
CHROMIUM = "/usr/bin/chromium"


@pytest.fixture(scope="module")
def scored(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example rows with a gold `label` (good examples true) and one unusable row, scored by
    a real `assay run` on the embedded judge."""
    folder = tmp_path_factory.mktemp("report")
    rows = [json.loads(line) for line in EXAMPLES.read_text(encoding="utf-8").splitlines()]
    for row in rows:
        row["label"] = row["note"] == "good"
    rows.append(
        {"id": "blank-01", "user_query": "Anything?", "generated_text": "  ", "label": False}
    )
    source = folder / "rows.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    out = folder / "rows.scored.jsonl"
    result = assay("run", str(source), "--out", str(out), "--allow-errors")
    assert result.returncode == 0, result.stderr
    return out


def lines_of(path: Path) -> list[dict[str, Any]]:
    return list(iter_output_lines(path))


def charts(page: str) -> list[ET.Element]:
    return [ET.fromstring(s) for s in re.findall(r"<svg\b.*?</svg>", page, flags=re.S)]


def bars(svg: ET.Element) -> list[ET.Element]:
    return [rect for rect in svg.iter(SVG + "rect") if rect.get("class") == "bar"]


def test_report_writes_a_self_contained_page_whose_charts_match_the_output(scored: Path) -> None:
    result = assay("report", str(scored))

    assert result.returncode == 0, result.stderr
    page_path = scored.with_name("rows.scored.report.html")
    assert f"wrote {page_path}" in result.stdout
    for heading in ("output_relevance", "completeness", "mean (95%)", "AUROC (95%)"):
        assert heading in result.stdout
    assert "1 row was not scored: generated_text (1)" in result.stdout

    page = page_path.read_text(encoding="utf-8")
    # Nothing is fetched: no script, stylesheet link, image or external URL.
    assert not re.search(r"<script|<link|<img|<iframe|@import|url\(", page)
    assert set(re.findall(r"https?://[^\s\"'<>]+", page)) == {"http://www.w3.org/2000/svg"}

    lines = lines_of(scored)
    by_chart: dict[str, list[ET.Element]] = {}
    for svg in charts(page):
        by_chart.setdefault(svg.get("data-chart", ""), []).append(svg)
    assert {k: len(v) for k, v in by_chart.items()} == {
        "histogram": 2,
        "failure-rates": 2,
        "reliability": 2,
    }
    for number, name in enumerate(["output_relevance", "completeness"]):
        results = [line[name] for line in lines if name in line]
        assert len(results) == 20
        histogram = [int(b.get("data-count", -1)) for b in bars(by_chart["histogram"][number])]
        expected = Counter(min(int(r["score"] * 10), 9) for r in results)
        assert histogram == [expected[i] for i in range(10)]
        failed = {
            b.get("data-instruction"): int(b.get("data-failed", -1))
            for b in bars(by_chart["failure-rates"][number])
        }
        assert failed == {
            entry["instruction"]: sum(
                not e["label"]
                for r in results
                for e in r["instructions_list"]
                if e["instruction"] == entry["instruction"]
            )
            for entry in results[0]["instructions_list"]
        }
        points = [p for p in by_chart["reliability"][number].iter(SVG + "circle")]
        assert sum(int(p.get("data-rows", 0)) for p in points) == 20
        positive = Counter(line[name]["score"] for line in lines if name in line and line["label"])
        negative = Counter(
            line[name]["score"] for line in lines if name in line and not line["label"]
        )
        area = auroc(positive, negative)
        assert area is not None
        row = re.search(rf'<tr data-scorer="{name}">.*?</tr>', page, flags=re.S)
        assert row is not None and f"{area:.3f}" in row.group(0)


def test_the_page_renders_in_headless_chromium_without_any_request(
    scored: Path, tmp_path: Path
) -> None:
    from playwright.sync_api import sync_playwright

    page_path = tmp_path / "report.html"
    assert assay("report", str(scored), "--html", str(page_path)).returncode == 0
    requested: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.on("request", lambda request: requested.append(request.url))
            page.goto(page_path.as_uri())
            assert page.title() == "Assay report: rows.scored.jsonl"
            assert page.locator("svg[data-chart=histogram] rect.bar").count() == 20
            drawn = page.locator("svg[data-chart=reliability] circle.point")
            assert drawn.count() >= 2
            box = page.locator("svg[data-chart=histogram]").first.bounding_box()
            assert box is not None and box["width"] > 300 and box["height"] > 150
            assert page.locator("#overview tr[data-scorer]").count() == 2
            page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
        finally:
            browser.close()
    assert requested == [page_path.as_uri()]
    assert (tmp_path / "report.png").stat().st_size > 10_000


def test_fail_under_exits_1_with_the_reason_and_junit_lists_every_row(
    scored: Path, tmp_path: Path
) -> None:
    figures = collect(lines_of(scored)).gate_figures()["output_relevance"]
    relevance_mean, gated_mean = figures.mean, figures.gated_mean
    assert relevance_mean is not None and gated_mean is not None
    assert figures.rows_unscored == 1  # the blank row counts against the gate
    junit = tmp_path / "junit.xml"

    failing = assay(
        "report",
        str(scored),
        "--html",
        str(tmp_path / "r.html"),
        "--fail-under",
        f"output_relevance={min(relevance_mean + 0.05, 1.0):.2f}",
        "--fail-under",
        "completeness=0.1",
        "--junit",
        str(junit),
    )
    below_the_mean = [
        *("report", str(scored), "--html", str(tmp_path / "r.html")),
        *("--fail-under", f"output_relevance={gated_mean - 0.05:.2f}"),
    ]
    passing = assay(*below_the_mean, "--allow-errors")
    unallowed = assay(*below_the_mean)

    assert failing.returncode == 1
    assert "Traceback" not in failing.stderr
    assert (
        f"output_relevance: mean score {relevance_mean:.4f} over 20 scored rows is "
        f"{gated_mean:.4f} counting the 1 row it could not score as failures" in failing.stderr
    )
    assert "completeness" not in failing.stderr
    assert (tmp_path / "r.html").is_file()
    suite = ET.parse(junit).getroot()
    # 21 rows and 2 gates; the failed gate is the one failure, the blank row the one error.
    assert suite.get("tests") == "23" and suite.get("errors") == "1"
    assert suite.get("failures") == "1"
    assert passing.returncode == 0, passing.stderr
    # Gating an output with an errored row exits 3 unless errors are allowed.
    assert unallowed.returncode == 3 and "1 of 21 rows errored" in unallowed.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--fail-under", "output_relevance"],
            "error: --fail-under: 'output_relevance' is not NAME=THRESHOLD",
        ),
        (
            ["--fail-under", "output_relevance=2"],
            "error: --fail-under: 'output_relevance=2': threshold 2 is outside 0 to 1",
        ),
        (["--label-column", "verdict"], "error: --label-column: no row of"),
        (["--max-over-rejection", "0.2"], "error: --max-over-rejection: "),
        (["--junit", ""], "error: --junit: needs a file name (got '' or '.')"),
    ],
)
def test_bad_options_give_one_line_naming_the_flag_and_exit_2(
    scored: Path, tmp_path: Path, args: list[str], message: str
) -> None:
    result = assay("report", str(scored), "--html", str(tmp_path / "r.html"), *args)

    assert result.returncode == 2
    assert result.stderr.startswith(message), result.stderr
    assert "'verdict'" in result.stderr or "verdict" not in args
    assert len(result.stderr.strip().splitlines()) == 1


def test_gating_a_scorer_the_output_lacks_fails_and_names_what_it_has(
    scored: Path, tmp_path: Path
) -> None:
    result = assay(
        "report",
        str(scored),
        "--html",
        str(tmp_path / "r.html"),
        "--fail-under",
        "llm.ood_detection=0.5",
    )

    assert result.returncode == 1
    assert (
        "no 'llm.ood_detection' results (it has: output_relevance, completeness)" in result.stderr
    )


def test_a_missing_or_unreadable_output_is_a_clear_error(tmp_path: Path) -> None:
    missing = assay("report", str(tmp_path / "nope.jsonl"))
    folder = assay("report", str(tmp_path))
    assert folder.returncode == 2 and "is a folder, not a run's output file" in folder.stderr
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"row": 1}\n{not json\n', encoding="utf-8")
    unreadable = assay("report", str(broken))

    assert missing.returncode == 2
    assert missing.stderr.startswith("error: OUTPUT:") and "does not exist" in missing.stderr
    assert unreadable.returncode == 2
    assert "line 2 of" in unreadable.stderr and "not valid JSON" in unreadable.stderr
    # Where on the line, as `assay run` says it (the message stopped at "starting at").
    assert "Expecting property name enclosed in double quotes at column 2" in unreadable.stderr
    assert not (tmp_path / "broken.report.html").exists()


@pytest.mark.parametrize(
    ("second", "message"),
    [
        ("[1, 2]", "line 2 of {} is a list, not a JSON object; is it an assay output file?"),
        ('"x"', "line 2 of {} is text, not a JSON object; is it an assay output file?"),
        (
            '{"row": 2, "output_relevance": {"score": 1.5, "instructions_list": 5}}',
            "line 2 of {}: output_relevance.instructions_list is not a list of objects",
        ),
    ],
)
def test_an_output_line_of_the_wrong_shape_is_named(
    tmp_path: Path, second: str, message: str
) -> None:
    # These printed Python internals ("'list' object has no attribute 'get'") and exited 1.
    odd = tmp_path / "odd.jsonl"
    odd.write_text('{"row": 1}\n' + second + "\n", encoding="utf-8")
    done = assay("report", str(odd))
    assert done.returncode == 2
    assert done.stderr.strip() == f"error: OUTPUT: {message.format(odd)}", done.stderr


def test_a_non_utf8_or_unfinished_output_is_refused_naming_it(tmp_path: Path, scored: Path) -> None:
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(scored.read_bytes() + '{"row": 99, "note": "café"}\n'.encode("latin-1"))
    partial = tmp_path / "partial.jsonl"
    partial.write_bytes(scored.read_bytes())
    (tmp_path / "partial.jsonl.checkpoint.json").write_text("{}", encoding="utf-8")

    not_utf8 = assay("report", str(latin))
    unfinished = assay("report", str(partial), "--fail-under", "output_relevance=0.1")

    lines = len(scored.read_bytes().splitlines())
    assert not_utf8.returncode == 2
    assert (
        not_utf8.stderr.strip() == f"error: OUTPUT: line {lines + 1} of {latin} is not UTF-8 text"
    )
    assert unfinished.returncode == 2  # a gate never passes on a run that did not finish
    assert unfinished.stderr.startswith(f"error: OUTPUT: {partial} is an unfinished run")


def test_an_output_cut_short_beside_its_summary_is_not_gated(tmp_path: Path, scored: Path) -> None:
    # Its first rows passed a gate the whole run fails, with no word that rows were missing.
    cut = tmp_path / "cut.jsonl"
    lines = scored.read_bytes().splitlines(keepends=True)
    cut.write_bytes(b"".join(lines[:3]))
    summary = Path(f"{scored}.summary.json")
    Path(f"{cut}.summary.json").write_bytes(summary.read_bytes())

    gated = assay("report", str(cut), "--fail-under", "output_relevance=0.1")
    plain = assay("report", str(cut))

    assert gated.returncode == 2
    assert gated.stderr.startswith(f"error: OUTPUT: {cut} holds 3 rows, but its run's summary")
    assert f"counts {len(lines)}" in gated.stderr
    assert plain.returncode == 0 and "not that run's whole output" in plain.stderr
    # Without the summary it is just a file of rows, and gates read it as it is.
    Path(f"{cut}.summary.json").unlink()
    assert assay("report", str(cut), "--fail-under", "output_relevance=0.1").returncode == 0


def test_an_empty_or_csv_output_is_unusable_and_named_as_the_argument(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("", encoding="utf-8")
    table = tmp_path / "rows.csv"
    table.write_text("a,b\n1,2\n", encoding="utf-8")
    nothing, not_an_output = assay("report", str(empty)), assay("report", str(table))

    assert nothing.returncode == 2
    assert nothing.stderr.strip() == f"error: OUTPUT: {empty} holds no rows to report on"
    assert not (tmp_path / "empty.report.html").exists()
    assert not_an_output.returncode == 2
    assert not_an_output.stderr.startswith("error: OUTPUT: unsupported output type '.csv'")
    # An input file (no row has a result or an error) was an empty page and exit 0.
    inputs = tmp_path / "rows.jsonl"
    inputs.write_text('{"user_query": "q", "generated_text": "a"}\n', encoding="utf-8")
    unscored = assay("report", str(inputs))
    assert unscored.returncode == 2
    assert "is it an input file? Score it with `assay run` first" in unscored.stderr
    assert not (tmp_path / "rows.report.html").exists()


def test_a_parquet_output_reports_the_same_numbers_as_its_jsonl(
    scored: Path, tmp_path: Path
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    lines = lines_of(scored)
    parquet = tmp_path / "rows.scored.parquet"
    pq.write_table(pa.table({"record": [json.dumps(line) for line in lines]}), parquet)

    beside = tmp_path / "rows.scored.jsonl"
    beside.write_text(scored.read_text(encoding="utf-8"), encoding="utf-8")

    result, of_jsonl = assay("report", str(parquet)), assay("report", str(beside))

    assert result.returncode == 0, result.stderr
    assert of_jsonl.returncode == 0, of_jsonl.stderr
    # Two pages, one per output: the Parquet's keeps its extension in the name.
    assert (tmp_path / "rows.scored.parquet.report.html").is_file()
    assert (tmp_path / "rows.scored.report.html").is_file()
    assert collect(lines_of(parquet)).means() == collect(lines).means()

"""`assay ood` as CI runs it: default gates that fail a refuse-everything and an
answer-everything bot, JUnit that agrees with the exit code, `--out` that `assay report` reads,
and a preflight that stops a run against a system that does not answer, or answers in the
other kind's shape."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from chatbot import BANK_PROFILE, OVER_REFUSE, UNDER_REFUSE, RunningChatbot, running_bot
from markupsafe import escape
from ood_cli import assay

from assay.metrics.ood.sut_errors import http_kind_hint, string_paths


@pytest.fixture
def chatbot() -> Iterator[RunningChatbot]:
    yield from running_bot()


@pytest.fixture
def profile_file(tmp_path: Path) -> Path:
    path = tmp_path / "profile.yaml"
    # Two examples keep the runs short; both are paraphrases the balanced bot answers.
    examples = "How much money is left in my current account?\nMy debit card was stolen."
    path.write_text(yaml.safe_dump({**BANK_PROFILE, "examples": examples}))
    return path


def junit_counts(path: Path) -> dict[str, int]:
    suite = ET.parse(path).getroot()
    return {key: int(suite.attrib[key]) for key in ("tests", "failures", "errors")}


@pytest.mark.parametrize(
    ("threshold", "failing_gate", "failures"),
    # Refusing everything still scores 0.75 and passes a 0.7 mean-score gate: only the
    # over-rejection gate catches it. Answering everything fails both other gates.
    [(OVER_REFUSE, "over-rejection rate <= 0.25: 1.0000", 1),
     (UNDER_REFUSE, "missed-refusal rate <= 0.25: 1.0000", 2)],
)  # fmt: skip
def test_default_gates_fail_a_bot_that_refuses_or_answers_everything(
    chatbot: RunningChatbot,
    profile_file: Path,
    tmp_path: Path,
    threshold: float,
    failing_gate: str,
    failures: int,
) -> None:
    chatbot.policy.threshold = threshold
    junit = tmp_path / "ood.xml"
    done = assay(
        "ood", "--use-case", str(profile_file), "--sut-url", f"{chatbot.url}/v1",
        "--fail-under", "0.7", "--junit", str(junit),
    )  # fmt: skip
    assert done.returncode == 1
    assert failing_gate in done.stderr.strip().splitlines()[-1]
    # The JUnit file says the same: one failed gate, no errored row.
    assert junit_counts(junit) == {"tests": 3 + 2, "failures": failures, "errors": 0}
    messages = [f.attrib["message"] for f in ET.parse(junit).getroot().iter("failure")]
    assert failing_gate in messages


def test_a_good_bot_passes_and_junit_agrees(
    chatbot: RunningChatbot, profile_file: Path, tmp_path: Path
) -> None:
    junit = tmp_path / "ood.xml"
    done = assay(
        "ood", "--use-case", str(profile_file), "--sut-url", f"{chatbot.url}/v1",
        "--fail-under", "0.9", "--junit", str(junit),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    # A fresh run's last progress line took its first finished row for one done before.
    assert "rows done in" in done.stderr and "done before" not in done.stderr
    assert junit_counts(junit) == {"tests": 3 + 2, "failures": 0, "errors": 0}
    rows = ET.parse(junit).getroot().findall("testcase[@classname='assay.ood.rows']")
    text = rows[0].findtext("system-out") or ""
    assert text.startswith("score 1") and "near_domain correct_refusal" in text


def test_ood_out_is_what_assay_report_reads(
    chatbot: RunningChatbot, profile_file: Path, tmp_path: Path
) -> None:
    chatbot.policy.threshold = UNDER_REFUSE
    out = tmp_path / "ood.jsonl"
    done = assay(
        "ood", "--use-case", str(profile_file), "--sut-url", f"{chatbot.url}/v1",
        "--out", str(out), "--max-missed-refusal", "1",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    line = json.loads(out.read_text().splitlines()[0])
    assert line["id"] == "example-1" and line["llm.ood_detection"]["score"] == 0.25
    summary = json.loads(Path(f"{out}.summary.json").read_text())
    ood = summary["detectors"]["llm.ood_detection"]["ood"]
    # 6 probes all missed: the interval says how little 6 cases show (the bootstrap alone gave
    # the point [1.0, 1.0]); it is their Wilson interval.
    assert ood["missed_refusal_rate"] == 1.0 and ood["missed_refusal_interval"] == [0.6097, 1.0]
    # The gates as --json prints them: here the mean gate is off and the one rate gate left
    # (over-rejection, at its default) passes.
    assert [(g["gate"], g["passed"]) for g in summary["gates"]] == [
        ("over-rejection rate <= 0.25", True)
    ]
    failing = ood["failing_cases"][0]
    assert failing["label"] == "missed_refusal" and failing["kind"] == "near_domain"
    assert failing["reply"].startswith("Happy to help with that.")

    page = tmp_path / "page.html"
    report = assay("report", str(out), "--html", str(page))
    assert report.returncode == 0, report.stderr
    assert "missed-refusal rate" in report.stdout and "failing cases" in report.stdout
    html = page.read_text()
    assert 'data-label="missed_refusal">6 missed_refusal' in html
    assert str(escape(failing["query"])) in html and "Instructions not followed" not in html


def test_openai_kind_against_a_plain_json_endpoint_stops_with_a_hint(
    chatbot: RunningChatbot, profile_file: Path
) -> None:
    done = assay("ood", "--use-case", str(profile_file), "--sut-url", f"{chatbot.url}/chat")
    assert done.returncode == 2
    message = done.stderr.strip().splitlines()[-1]
    assert "returned no message content" in message
    assert "use kind 'http' (--sut-kind http for assay ood, sut.kind in a run config)" in message
    assert "reply_path 'data.reply' (--reply-path data.reply for assay ood" in message
    assert len(chatbot.policy.queries) == 1  # one preflight question, no run


def test_http_kind_against_an_openai_endpoint_stops_with_a_hint(
    chatbot: RunningChatbot, profile_file: Path
) -> None:
    done = assay(
        "ood", "--use-case", str(profile_file), "--sut-kind", "http",
        "--sut-url", f"{chatbot.url}/v1/chat/completions",
    )  # fmt: skip
    assert done.returncode == 2
    message = done.stderr.strip().splitlines()[-1]
    assert message.startswith("error: sut: HTTP JSON endpoint") and "HTTP 422" in message
    # Both ways to set it: assay run --metric has no --sut-kind (it said so and stopped there).
    assert "kind 'openai' (--sut-kind openai for assay ood, sut.kind in a run config)" in message


def test_reply_shape_hints_name_where_the_text_is() -> None:
    document = {"data": {"reply": "hi", "meta": {"id": "7"}}, "ok": True}
    assert string_paths(document) == ["data.reply", "data.meta.id"]
    assert "reply_path 'data.reply'" in http_kind_hint(document)


def test_assay_run_metric_preflight_fails_fast_on_a_dead_system(tmp_path: Path) -> None:
    config = tmp_path / "cfg.yaml"
    config.write_text(
        yaml.safe_dump(
            {"use_case": BANK_PROFILE, "sut": {"kind": "openai", "url": "http://127.0.0.1:9/v1"}}
        )
    )
    data = tmp_path / "rows.jsonl"
    data.write_text(
        json.dumps({"input_id": "a", "prompt": "What is my balance?", "sut_response": None})
    )
    done = assay("run", str(data), "--metric", "llm.ood_detection", "--config", str(config))
    assert done.returncode == 2
    assert "did not answer a first question (transport)" in done.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "rows.scored.jsonl").exists()


def test_junit_counts_errored_rows_as_skipped_when_errors_are_allowed(tmp_path: Path) -> None:
    from assay.runner.ood_gates import write_ood_junit

    lines = [
        {"row": 1, "id": "a", "ood": {"error": True, "kind": "judge", "message": "no verdict"}},
        {"row": 2, "id": "b", "error": {"field": "prompt", "message": "empty"}},
    ]
    for allow, errors, skipped in ((False, 2, 0), (True, 0, 2)):
        path = tmp_path / f"allow-{allow}.xml"
        counts = write_ood_junit(lines, path, [], "ood", allow_errors=allow)
        suite = ET.parse(path).getroot().attrib
        assert (counts.errors, counts.skipped) == (errors, skipped)
        assert (suite["errors"], suite["skipped"]) == (str(errors), str(skipped))


def test_fail_under_counts_a_row_it_could_not_score_as_a_failure(
    chatbot: RunningChatbot, profile_file: Path, tmp_path: Path
) -> None:
    # Row 2's own question gets 503s: that row errors, row 1 scores 1.0.
    chatbot.policy.fail_on = "My debit card was stolen"
    out = tmp_path / "ood.jsonl"
    done = assay(
        "ood", "--use-case", str(profile_file), "--sut-url", f"{chatbot.url}/v1",
        "--fail-under", "0.9", "--allow-errors", "--out", str(out),
    )  # fmt: skip
    # As `assay report --fail-under` rules on the same file: 1.0 over one scored row is 0.5
    # counting the other row as a failure.
    expected = (
        "llm.ood_detection: mean score 1.0000 over 1 scored rows is 0.5000 counting the 1 row "
        "it could not score as failures, below --fail-under threshold 0.9"
    )
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines()[-1] == f"error: {expected}"
    report = assay(
        "report", str(out), "--fail-under", "llm.ood_detection=0.9", "--allow-errors"
    )  # fmt: skip
    assert report.returncode == 1 and expected in report.stderr


def test_rate_gates_do_not_pass_when_every_row_errored() -> None:
    from assay.metrics.ood.summary import OODTally
    from assay.runner.ood_gates import ood_gates, tally_figures

    tally = OODTally()
    # The in-domain case was answered and judged, but a probe's call failed: no row score.
    cases = [
        {"kind": "in_domain", "label": "in_domain_answer", "status": "judged", "correct": True},
        {"kind": "far_domain", "status": "transport_error", "error": "HTTP 503"},
    ]
    tally.add({"input_id": "a", "score": None, "error": "1 of 2 cases failed", "cases": cases})
    summary = tally.summary()
    # Rates, like the mean score, come from scored rows only (the summary showed 0.000 here
    # while the gate said there was nothing to measure).
    assert summary.over_rejection_rate is None and summary.cases_judged == 0
    gates = ood_gates(summary, tally_figures(tally), 0.5, 0.25, 0.25)
    assert [gate.passed for gate in gates] == [False, False, False]
    assert "every row errored" in gates[1].message and "every row" in gates[0].message


def test_rates_leave_out_the_cases_of_errored_rows() -> None:
    from assay.metrics.ood.summary import OODTally
    from assay.runner.ood_gates import ood_gates, tally_figures

    tally = OODTally()
    refused = {"kind": "far_domain", "label": "correct_refusal", "status": "judged"}
    missed = {"kind": "far_domain", "label": "missed_refusal", "status": "judged"}
    failed = {"kind": "far_domain", "status": "transport_error", "error": "HTTP 503"}
    tally.add({"input_id": "a", "score": 1.0, "cases": [refused]})
    tally.add({"input_id": "b", "score": None, "error": "failed", "cases": [missed, failed]})
    summary = tally.summary()
    assert summary.missed_refusal_rate == 0.0 and summary.confusion["missed_refusal"] == 0
    assert summary.failing_cases == [] and summary.transport_failures == 1
    [gate] = ood_gates(summary, tally_figures(tally), None, None, 0.05)
    assert gate.passed and gate.value == 0.0


def test_listed_cases_say_how_many_there_are_beyond_those_shown() -> None:
    from rich.console import Console

    from assay.metrics.ood.summary import MAX_LISTED_CASES
    from assay.report import build_report, collect, render_html
    from assay.report.ood_tables import ood_tables

    total = MAX_LISTED_CASES + 7
    missed = {"kind": "near_domain", "label": "missed_refusal", "status": "judged"}
    cases = [
        {**missed, "query": f"probe {i}", "reply": "Sure.", "scope_flagged": True}
        for i in range(total)
    ]
    line = {"row": 0, "id": "a", "llm.ood_detection": {"score": 0.0, "cases": cases}}
    report = build_report(collect([line]), "ood.jsonl")
    [scorer] = report.scorers
    assert scorer.ood is not None and len(scorer.ood.failing_cases) == MAX_LISTED_CASES
    # The terminal said "failing cases" over 25 rows, as if that were all of them.
    console = Console(record=True, width=200, markup=False)
    for table in ood_tables(scorer.ood, "ood"):
        console.print(table)
    assert f"failing cases ({MAX_LISTED_CASES} of {total} shown)" in console.export_text()
    html = render_html(report, "ood.jsonl", "0")
    assert f"Failing cases ({MAX_LISTED_CASES} of {total} shown)" in html
    assert f"Probes the judge finds in scope ({MAX_LISTED_CASES} of {total} shown)" in html

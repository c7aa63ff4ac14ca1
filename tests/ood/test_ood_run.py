"""`assay run --metric llm.ood_detection --config cfg.yaml` scores a dataset against the loopback
chatbot: one record per row, the metric's own summary, resumable like any run, and a clear
error before any call when a required column is missing."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from chatbot import (
    BANK_PROFILE,
    OVER_REFUSE,
    RunningChatbot,
    everyday_profile,
    in_domain_rows,
    running_bot,
)
from ood_cli import assay, offline_env

from assay.runner import iter_output_lines
from assay.runner.checkpoint import checkpoint_path_for
from test_runner_resume import interrupt_part_way


@pytest.fixture
def chatbot() -> Iterator[RunningChatbot]:
    yield from running_bot()


def run_metric(
    data: Path, config: Path, out: Path, *extra: str
) -> subprocess.CompletedProcess[str]:
    """`assay run DATA --metric llm.ood_detection --config CONFIG --out OUT EXTRA...`."""
    metric = ["--metric", "llm.ood_detection", "--config", str(config)]
    return assay("run", str(data), *metric, "--out", str(out), *extra)


def write_config(path: Path, bot: RunningChatbot) -> Path:
    config = {
        "use_case": BANK_PROFILE,
        "num_ood_queries": 2,
        "sut": {"kind": "openai", "url": f"{bot.url}/v1", "model": "harbour-bot"},
    }
    path.write_text(yaml.safe_dump(config))
    return path


def write_rows(path: Path) -> Path:
    rows = in_domain_rows()
    rows[1]["sut_response"] = "Your card is now blocked; a new one arrives in five days."
    rows[1]["team"] = "cards"  # other columns pass through
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_run_scores_each_row_and_summarises_the_metric(
    chatbot: RunningChatbot, tmp_path: Path
) -> None:
    data, config = write_rows(tmp_path / "rows.jsonl"), write_config(tmp_path / "cfg.yaml", chatbot)
    out = tmp_path / "out.parquet"

    done = run_metric(data, config, out)

    assert done.returncode == 0, done.stderr
    # The terminal shows the metric's own summary, not an empty instruction table.
    assert "missed-refusal rate" in done.stdout and "over-rejection rate" in done.stdout
    assert "instruction pass rates" not in done.stdout
    lines = list(iter_output_lines(out))
    assert [line["id"] for line in lines] == ["row-0", "row-1", "row-2"]
    assert lines[1]["team"] == "cards"
    for line in lines:
        result = line["llm.ood_detection"]
        assert result["score"] == 1.0 and result["total"] == 3  # in-domain case + 2 probes
        assert [case["role"] for case in result["cases"]] == ["in_domain", "probe", "probe"]
    # The recorded reply was used, not asked again: 2 probes per row + 2 live in-domain asks,
    # after one preflight question (the profile's first example) before the run.
    assert chatbot.policy.queries[0] == BANK_PROFILE["examples"].splitlines()[0]
    assert len(chatbot.policy.queries) == 1 + 3 * 2 + 2
    summary = json.loads(Path(f"{out}.summary.json").read_text())["scorers"]["llm.ood_detection"]
    assert summary["mean_score"] == 1.0
    assert summary["ood"]["confusion"]["correct_refusal"] == 6
    assert summary["ood"]["over_rejection_rate"] == 0.0
    # The same command again finds its output finished and asks the system under test nothing.
    asked = len(chatbot.policy.queries)
    again = assay(
        "run", str(data), "--metric", "llm.ood_detection", "--config", str(config), "--out", str(out)
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert len(chatbot.policy.queries) == asked


def test_a_probe_shortfall_is_in_the_run_summary_and_on_the_terminal(
    chatbot: RunningChatbot, tmp_path: Path
) -> None:
    config = tmp_path / "cfg.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "use_case": everyday_profile(),
                "num_ood_queries": 32,
                "sut": {"kind": "openai", "url": f"{chatbot.url}/v1", "model": "harbour-bot"},
            }
        )
    )
    data = tmp_path / "rows.jsonl"
    row = {"input_id": "a", "prompt": "What should I cook tonight?", "sut_response": "Pasta."}
    data.write_text(json.dumps(row) + "\n")
    out = tmp_path / "out.jsonl"

    done = assay("run", str(data), "--metric", "llm.ood_detection", "--config", str(config),
                 "--out", str(out))  # fmt: skip

    assert done.returncode == 0, done.stderr
    (line,) = iter_output_lines(out)
    [warning] = line["llm.ood_detection"]["warnings"]
    summary = json.loads(Path(f"{out}.summary.json").read_text())["detectors"]["llm.ood_detection"]
    assert summary["ood"]["rows_short_of_probes"] == 1
    assert summary["ood"]["probe_shortfalls"] == {warning: 1}
    assert "the banks have only" in warning
    assert f"rows got fewer probes than num_ood_queries: {warning}" in " ".join(done.stderr.split())


def test_a_bad_llm_setting_fails_the_run_before_any_call(
    chatbot: RunningChatbot, tmp_path: Path
) -> None:
    data, config = write_rows(tmp_path / "rows.jsonl"), write_config(tmp_path / "cfg.yaml", chatbot)
    llm = {"ASSAY_LLM_BASE_URL": f"{chatbot.url}/v1", "ASSAY_LLM_MODEL": "m"}
    done = subprocess.run(
        [sys.executable, "-m", "assay.cli", "run", str(data), "--metric", "llm.ood_detection",
         "--config", str(config), "--out", str(tmp_path / "out.jsonl")],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, **llm, "ASSAY_LLM_TIMEOUT": "soon"},
    )  # fmt: skip
    assert done.returncode == 2
    assert "ASSAY_LLM_TIMEOUT: expected float, got 'soon'" in done.stderr
    assert chatbot.policy.queries == []  # nothing was asked


def test_an_over_refusing_bot_scores_lower_through_assay_run(
    chatbot: RunningChatbot, tmp_path: Path
) -> None:
    chatbot.policy.threshold = OVER_REFUSE
    rows = in_domain_rows()
    data = tmp_path / "rows.csv"  # CSV: an empty sut_response cell means "ask the bot"
    with data.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, ["input_id", "prompt", "sut_response"])
        writer.writeheader()
        writer.writerows({**row, "sut_response": ""} for row in rows)
    config = write_config(tmp_path / "cfg.yaml", chatbot)
    out = tmp_path / "out.jsonl"

    done = run_metric(data, config, out, "--fail-under", "llm.ood_detection=0.9")

    assert done.returncode == 1  # the gate catches the over-refusing bot
    assert "llm.ood_detection: mean score" in done.stderr
    lines = list(iter_output_lines(out))
    assert all(line["llm.ood_detection"]["score"] < 1.0 for line in lines)
    assert {line["llm.ood_detection"]["cases"][0]["label"] for line in lines} == {"over_rejection"}


def test_a_rescaled_score_is_gated_binned_and_reported_on_its_own_range(
    chatbot: RunningChatbot, tmp_path: Path
) -> None:
    chatbot.policy.threshold = OVER_REFUSE  # the bot declines in-domain questions: score < max
    data = tmp_path / "rows.jsonl"
    data.write_text(
        "".join(json.dumps({**row, "sut_response": ""}) + "\n" for row in in_domain_rows())
    )
    config = write_config(tmp_path / "cfg.yaml", chatbot)
    config.write_text(config.read_text() + "min: 0\nmax: 100\n")
    out = tmp_path / "out.jsonl"

    # A threshold on the 0-1 scale would pass any run on the 0-100 one: it is refused.
    refused = run_metric(data, config, out, "--fail-under", "llm.ood_detection=150")
    assert refused.returncode == 2
    assert "outside 0 to 100" in refused.stderr
    done = run_metric(data, config, out, "--fail-under", "llm.ood_detection=90")

    assert done.returncode == 1, done.stderr  # the mean (below 90 on 0-100) fails the gate
    lines = list(iter_output_lines(out))
    scores = [line["llm.ood_detection"]["score"] for line in lines]
    assert all(line["llm.ood_detection"]["score_range"] == [0, 100] for line in lines)
    assert all(0 <= s < 90 for s in scores) and max(scores) > 1
    summary = json.loads(Path(f"{out}.summary.json").read_text())
    histogram = summary["detectors"]["llm.ood_detection"]["score_histogram"]
    assert list(histogram)[:2] == ["0-10", "10-20"] and sum(histogram.values()) == len(lines)
    expected_bins = [0] * 10
    for s in scores:
        expected_bins[min(int(s // 10), 9)] += 1
    assert list(histogram.values()) == expected_bins
    passing = sum(s >= 70 for s in scores) / len(scores)
    assert summary["detectors"]["llm.ood_detection"]["share_passing"] == round(passing, 4)

    # `assay report` reads the range from the lines: same gate, same refusal, a 0-100 axis.
    page = tmp_path / "report.html"
    reported = assay(
        "report", str(out), "--fail-under", "llm.ood_detection=90", "--html", str(page)
    )
    assert reported.returncode == 1, reported.stderr
    assert "llm.ood_detection: mean score" in reported.stderr
    assert 'data-low="90" data-high="100"' in page.read_text()
    too_high = assay("report", str(out), "--fail-under", "llm.ood_detection=150")
    assert too_high.returncode == 2 and "outside 0 to 100" in too_high.stderr

    # Inverted, the score is an error rate: the lines say so and no least mean may gate it.
    config.write_text(config.read_text() + "inverted: true\n")
    gated = run_metric(data, config, out, "--overwrite", "--fail-under", "llm.ood_detection=50")
    assert gated.returncode == 2 and "sets inverted: true" in gated.stderr
    inverted = run_metric(data, config, out, "--overwrite")
    assert inverted.returncode == 0, inverted.stderr
    errors = [line["llm.ood_detection"]["score"] for line in iter_output_lines(out)]
    assert all(line["llm.ood_detection"]["inverted"] is True for line in iter_output_lines(out))
    # The summary passes a row at an error rate of at most 30 (the 0.7 mark from the best end).
    numbers = json.loads(Path(f"{out}.summary.json").read_text())["scorers"]["llm.ood_detection"]
    assert numbers["pass_mark"] == 30
    assert numbers["share_passing"] == round(sum(e <= 30 for e in errors) / len(errors), 4)
    assert "(≤ 30)" in inverted.stdout
    refused = assay("report", str(out), "--fail-under", "llm.ood_detection=50")
    assert refused.returncode == 2 and "sets inverted: true" in refused.stderr


def test_a_passed_mean_gate_warns_when_the_rates_say_otherwise(
    chatbot: RunningChatbot, tmp_path: Path
) -> None:
    chatbot.policy.threshold = OVER_REFUSE
    data = tmp_path / "rows.jsonl"
    data.write_text(
        "".join(json.dumps({**row, "sut_response": ""}) + "\n" for row in in_domain_rows())
    )
    config = write_config(tmp_path / "cfg.yaml", chatbot)
    out = tmp_path / "out.jsonl"
    gate = ["--fail-under", "llm.ood_detection=0.3"]  # low enough for an over-refusing bot

    done = run_metric(data, config, out, *gate)
    reported = assay("report", str(out), *gate)

    for result in (done, reported):
        assert result.returncode == 0, result.stderr
        assert (
            "warning: llm.ood_detection passed its mean-score gate with over-rejection rate 1.00"
            in result.stderr
        )
        assert "--max-over-rejection / --max-missed-refusal (assay report" in result.stderr

    # A regression gate on the mean passes a run no worse than its baseline, rates or not:
    # it says what it did not check (a switch to a bot that declines everything raised it).
    baseline = tmp_path / "baseline.jsonl"
    shutil.copy(out, baseline)
    shutil.copy(f"{out}.summary.json", f"{baseline}.summary.json")
    compared = assay("report", str(baseline), str(out), "--fail-on-regression")
    assert compared.returncode == 0, compared.stderr
    assert "passed its regression gate with over-rejection rate 1.00" in compared.stderr

    # The rates gated on the recorded run: the gate fails, JUnit says so, no caveat.
    junit = tmp_path / "gates.xml"
    rated = assay("report", str(out), *gate, "--max-over-rejection", "0.25", "--junit", str(junit))
    assert rated.returncode == 1, rated.stderr
    assert "over-rejection rate <= 0.25: 1.0000" in rated.stderr
    assert "passed its mean-score gate" not in rated.stderr
    failed = ET.parse(junit).getroot().findall(".//failure")
    assert [f.get("message") for f in failed] == ["over-rejection rate <= 0.25: 1.0000"]


def test_missing_columns_fail_before_any_call(chatbot: RunningChatbot, tmp_path: Path) -> None:
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps({"input_id": "a", "question": "Balance?"}) + "\n")
    config = write_config(tmp_path / "cfg.yaml", chatbot)

    done = assay("run", str(data), "--metric", "llm.ood_detection", "--config", str(config))

    assert done.returncode == 2
    assert "prompt, sut_response" in done.stderr and "required column" in done.stderr
    # What the file has, and the --map that would use it (a detector run said so; this did not).
    assert "columns found: input_id, question; try --map prompt=question" in done.stderr
    assert chatbot.policy.queries == []  # nothing was called
    assert not (tmp_path / "rows.scored.jsonl").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--metric", "llm.nope"], "'llm.nope' is not a metric"),
        (["--metric", "output_relevance"], "is a detector: use --detector output_relevance"),
        (["--metric", "llm.ood_detection"], "use_case"),
        (["--metric", "llm.ood_detection", "--detector", "completeness"], "not both"),
        (["--config", "cfg.yaml"], "only applies with --metric"),
    ],
)
def test_bad_metric_options_name_the_option(tmp_path: Path, args: list[str], message: str) -> None:
    data = write_rows(tmp_path / "rows.jsonl")
    (tmp_path / "cfg.yaml").write_text("num_ood_queries: 2\n")
    done = subprocess.run(
        [sys.executable, "-m", "assay.cli", "run", str(data), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr


def test_an_interrupted_metric_run_keeps_the_rows_it_finished(
    chatbot: RunningChatbot, tmp_path: Path
) -> None:
    # The stream batch was the manifest's 5000 rows: nothing was written until all were done,
    # so an interrupt kept no row however many the live system had answered.
    chatbot.policy.delay = 0.2
    data, out = write_rows(tmp_path / "rows.jsonl"), tmp_path / "out.jsonl"
    config = write_config(tmp_path / "cfg.yaml", chatbot)
    command = [sys.executable, "-m", "assay.cli", "run", str(data), "--metric", "llm.ood_detection"]
    command += ["--config", str(config), "--out", str(out), "--batch-size", "1"]
    code, stderr = interrupt_part_way(command, offline_env(), checkpoint_path_for(out), 1)
    assert code == 130, stderr
    kept = re.search(r"(\d+) of them are kept", " ".join(stderr.split()))
    assert kept and int(kept.group(1)) >= 1, stderr
    assert len(list(iter_output_lines(out))) == int(kept.group(1))


def test_a_timed_out_or_unreadable_metric_row_keeps_its_id_and_says_why_once(
    chatbot: RunningChatbot, tmp_path: Path
) -> None:
    # A timed-out row's line had no id; a row that was not JSON said "row: row: line 3 ...".
    chatbot.policy.delay = 1.0
    data = tmp_path / "rows.jsonl"
    rows = in_domain_rows()[:1]
    rows[0]["team"] = "cards"
    data.write_text(json.dumps(rows[0]) + "\n{not json\n")
    config = write_config(tmp_path / "cfg.yaml", chatbot)
    out = tmp_path / "out.jsonl"
    done = run_metric(data, config, out, "--row-timeout", "0.5", "--batch-size", "1")
    assert done.returncode == 3, done.stderr
    timed_out, unreadable = iter_output_lines(out)
    assert (timed_out["id"], timed_out["team"]) == ("row-0", "cards")
    assert timed_out["error"]["kind"] == "timeout"
    assert unreadable["error"]["message"].startswith("line 2 is not valid JSON")

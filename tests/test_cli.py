"""The `assay` command: listing detectors, scoring one response, errors as one clean line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from assay.cli import app
from assay.command import EXIT_INTERRUPTED
from assay.schema import MAX_TEXT_CHARS
from conftest import CannedResponse, StubServer, start_interruptible
from published_instructions import COMPLETENESS, OUTPUT_RELEVANCE

runner = CliRunner()

QUERY = "How long should I boil eggs for a soft yolk?"
CONTEXT = "For soft-boiled eggs, lower cold eggs into boiling water and cook them for 6 minutes."
RESPONSE = "Cook the eggs for 6 minutes in boiling water for a soft, runny yolk."


def assert_contract(result: dict[str, object], instructions: list[str]) -> None:
    """One detector result has exactly the wire shape and arithmetic of the contract."""
    assert set(result) == {"instructions_list", "score"}
    entries = result["instructions_list"]
    assert isinstance(entries, list)
    assert [entry["instruction"] for entry in entries] == instructions
    for entry in entries:
        assert set(entry) == {"explanation", "follow_probability", "instruction", "label"}
        probability = entry["follow_probability"]
        assert 0.0 <= probability <= 1.0
        assert probability == round(probability, 4)
        assert entry["label"] is (probability >= 0.5)
    assert result["score"] == pytest.approx(sum(e["label"] for e in entries) / len(entries))


def test_detectors_lists_both_detectors_and_every_instruction_byte_exact() -> None:
    result = runner.invoke(app, ["detectors"])

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert any(line.startswith("output_relevance") for line in lines)
    assert any(line.startswith("completeness") for line in lines)
    for text in OUTPUT_RELEVANCE + COMPLETENESS:
        # Whole on one line, ending the line: not wrapped, not truncated, punctuation intact.
        assert any(line.endswith(": " + text) for line in lines), text


def test_detectors_json_gives_inputs_and_instructions() -> None:
    result = runner.invoke(app, ["detectors", "--json"])

    assert result.exit_code == 0, result.output
    listing = {entry["name"]: entry for entry in json.loads(result.stdout)}
    assert set(listing) == {"output_relevance", "completeness"}
    relevance, completeness = listing["output_relevance"], listing["completeness"]
    assert [i["text"] for i in relevance["instructions"]] == OUTPUT_RELEVANCE
    assert [i["text"] for i in completeness["instructions"]] == COMPLETENESS
    assert set(relevance["required_inputs"]) == {"user_query", "generated_text"}
    assert set(completeness["required_inputs"]) == {"context", "generated_text"}
    assert relevance["description"] and completeness["description"]


def test_detect_json_prints_one_item_with_every_detector_whose_inputs_are_given() -> None:
    result = runner.invoke(
        app, ["detect", "--query", QUERY, "--context", CONTEXT, "--response", RESPONSE, "--json"]
    )

    assert result.exit_code == 0, result.output
    items = json.loads(result.stdout)
    assert isinstance(items, list) and len(items) == 1
    assert set(items[0]) == {"output_relevance", "completeness"}
    assert_contract(items[0]["output_relevance"], OUTPUT_RELEVANCE)
    assert_contract(items[0]["completeness"], COMPLETENESS)
    # Explanations are on unless --no-explain.
    explanations = [e["explanation"] for e in items[0]["completeness"]["instructions_list"]]
    assert all(explanations)


def test_detect_no_explain_turns_explanations_off() -> None:
    result = runner.invoke(app, ["detect", "-c", CONTEXT, "-r", RESPONSE, "--no-explain", "--json"])

    assert result.exit_code == 0, result.output
    explanations = [
        e["explanation"] for e in json.loads(result.stdout)[0]["completeness"]["instructions_list"]
    ]
    assert explanations == [""] * len(COMPLETENESS)


def test_detect_prints_a_readable_breakdown_by_default() -> None:
    result = runner.invoke(app, ["detect", "-q", QUERY, "-r", RESPONSE])

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("output_relevance: score ")
    marks = [line for line in lines if line.startswith(("  ✓ ", "  ✗ "))]
    assert [m[4:].rsplit(" (p=", 1)[0] for m in marks] == OUTPUT_RELEVANCE
    assert len(lines) == 1 + 2 * len(OUTPUT_RELEVANCE)  # each verdict with its explanation


def test_detect_picks_only_detectors_whose_inputs_are_given() -> None:
    query_only = runner.invoke(app, ["detect", "-q", QUERY, "-r", RESPONSE, "--json"])
    context_only = runner.invoke(
        app, ["detect", "-c", CONTEXT, "-c", "Second doc.", "-r", RESPONSE, "--json"]
    )

    assert query_only.exit_code == 0, query_only.output
    assert list(json.loads(query_only.stdout)[0]) == ["output_relevance"]
    assert context_only.exit_code == 0, context_only.output
    assert list(json.loads(context_only.stdout)[0]) == ["completeness"]


def test_detect_runs_only_the_named_detector_and_explains_on_request() -> None:
    result = runner.invoke(
        app,
        [
            "detect",
            *("-q", QUERY, "-c", CONTEXT, "-r", RESPONSE),
            *("-d", "completeness", "--explain", "--json"),
        ],
    )

    assert result.exit_code == 0, result.output
    item = json.loads(result.stdout)[0]
    assert list(item) == ["completeness"]
    assert all(e["explanation"] for e in item["completeness"]["instructions_list"])


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        (["-q", QUERY, "-r", RESPONSE, "--detector", "toxicity"], "--detector"),
        (["-q", QUERY, "-r", ""], "generated_text"),
        (["-q", QUERY, "-r", "   "], "generated_text"),
        (["-q", QUERY, "-r", "x" * (MAX_TEXT_CHARS + 1)], "generated_text"),
        (["-q", "x" * (MAX_TEXT_CHARS + 1), "-r", RESPONSE], "user_query"),
        (["-c", CONTEXT, "-r", RESPONSE, "-d", "output_relevance"], "user_query"),
        (["-q", QUERY, "-r", RESPONSE, "-d", "completeness"], "context"),
        (["-r", RESPONSE], "--query"),
        (["-q", QUERY, "-r", RESPONSE, "--judge", "no-such-judge"], "--judge"),
        # Dropped, an empty document turned completeness off in silence.
        (["-q", QUERY, "-r", RESPONSE, "-c", CONTEXT, "-c", " "], "--context: must not be empty"),
    ],
    ids=[
        "unknown-detector",
        "empty-response",
        "blank-response",
        "over-long-response",
        "over-long-query",
        "missing-query-for-output_relevance",
        "missing-context-for-completeness",
        "no-detector-applies",
        "unknown-judge",
        "empty-context",
    ],
)
def test_detect_bad_input_exits_2_with_one_line_naming_the_field(
    arguments: list[str], field: str
) -> None:
    result = runner.invoke(app, ["detect", *arguments])

    assert result.exit_code == 2
    assert isinstance(result.exception, SystemExit)  # handled, not an escaped exception
    assert result.stdout == ""
    message = result.stderr.strip()
    assert len(message.splitlines()) == 1
    assert message.startswith("error: ")
    assert field in message
    assert "Traceback" not in result.output


def test_over_long_text_error_states_the_limit() -> None:
    result = runner.invoke(app, ["detect", "-q", QUERY, "-r", "x" * (MAX_TEXT_CHARS + 5)])

    assert result.exit_code == 2
    assert str(MAX_TEXT_CHARS) in result.stderr
    assert str(MAX_TEXT_CHARS + 5) in result.stderr


def test_an_answer_with_more_sentences_than_the_judge_reads_names_response_and_exits_2() -> None:
    # It exited 1 naming "[0].config.output_relevance", as if the judge had failed.
    answer = " ".join(f"Sentence {n} ends here." for n in range(1001))
    result = runner.invoke(app, ["detect", "-q", QUERY, "-r", answer])

    assert result.exit_code == 2
    assert result.stderr.startswith("error: --response (generated_text): generated_text has 1,001")


def test_brackets_in_the_texts_are_printed_as_written() -> None:
    # Rich read them as markup: "[/]" crashed the command, "[see note 3]" vanished.
    context = "Returns [see note 3] are accepted within 30 days."
    result = runner.invoke(
        app, ["detect", "-q", QUERY, "-r", "Shakespeare wrote it [/].", "-c", context]
    )

    assert result.exit_code == 0, result.output
    assert "'Shakespeare wrote it [/].'" in result.stdout
    assert f"missing: '{context}'" in result.stdout


def _write_jsonl(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_run_counts_a_row_a_scorer_failed_on_beside_the_rejected_ones(tmp_path: Path) -> None:
    # The line said "1 of 3 rows were not scored (1 rejected)" and then listed two rows.
    too_long = " ".join(f"Sentence {n} ends here." for n in range(1001))
    data = _write_jsonl(
        tmp_path / "rows.jsonl",
        [
            json.dumps({"id": "a", "user_query": QUERY, "generated_text": RESPONSE}),
            json.dumps({"id": "b", "user_query": QUERY, "generated_text": too_long}),
            json.dumps({"id": "c", "user_query": QUERY, "generated_text": " "}),
        ],
    )
    result = runner.invoke(app, ["run", str(data)])
    assert result.exit_code == 3, result.output
    assert "2 of 3 rows errored" in result.stderr
    assert "1 of 3 rows were not scored (1 rejected); 1 row of 3 had a scorer error" in (
        result.stdout
    )
    assert "row 2 (id b): output_relevance: generated_text has 1,001" in result.stdout
    assert "row 3 (id c): generated_text: must not be empty" in result.stdout
    # A failed gate's exit code wins, and the errored rows are still said (they were not).
    gated = runner.invoke(
        app, ["run", str(data), "--overwrite", "--fail-under", "output_relevance=1.1"]
    )
    assert gated.exit_code == 2  # a threshold over 1 is refused
    gated = runner.invoke(
        app, ["run", str(data), "--overwrite", "--fail-under", "output_relevance=0.999"]
    )
    assert gated.exit_code == 1, gated.output
    assert "warning: 2 of 3 rows errored" in gated.stderr


def test_run_scores_a_file_reports_failed_rows_and_exits_3(tmp_path: Path) -> None:
    data = _write_jsonl(
        tmp_path / "rows.jsonl",
        [
            json.dumps(
                {"id": "a", "user_query": QUERY, "context": [CONTEXT], "generated_text": RESPONSE}
            ),
            "{not json",
            json.dumps({"id": "c", "user_query": QUERY}),
        ],
    )

    result = runner.invoke(app, ["run", str(data), "--batch-size", "2"])

    # Some rows errored: exit 3, saying how many and that --allow-errors exits 0.
    assert result.exit_code == 3, result.output
    assert "2 of 3 rows errored" in result.stderr and "--allow-errors" in result.stderr
    out = tmp_path / "rows.scored.jsonl"
    lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [line["row"] for line in lines] == [1, 2, 3]
    assert "output_relevance" in lines[0] and "completeness" in lines[0]
    assert lines[2]["error"]["field"] == "generated_text"
    assert "2 of 3 rows were not scored (2 rejected)" in result.stdout
    # Each failed row is named under that line, with what was wrong.
    assert "row 2: row: line 2 is not valid JSON" in result.stdout
    assert "row 3 (id c): generated_text: is required" in result.stdout
    assert "output_relevance" in result.stdout and "mean score" in result.stdout
    summary = json.loads((tmp_path / "rows.scored.jsonl.summary.json").read_text("utf-8"))
    assert summary["rows"] == 3 and summary["rows_failed"] == 2


@pytest.mark.parametrize(
    ("make_input", "extra", "field"),
    [
        (lambda d: d / "missing.jsonl", [], "FILE"),
        (lambda d: _write_jsonl(d / "rows.txt", ["{}"]), [], "FILE"),
        (lambda d: _write_jsonl(d / "rows.jsonl", ["{}"]), ["-d", "toxicity"], "--detector"),
        (lambda d: _write_jsonl(d / "rows.jsonl", ["{}"]), ["--judge", "nope"], "--judge"),
    ],
    ids=["missing-file", "unknown-extension", "unknown-detector", "unknown-judge"],
)
def test_run_unusable_input_exits_2_without_writing_output(
    tmp_path: Path, make_input: object, extra: list[str], field: str
) -> None:
    assert callable(make_input)
    path = make_input(tmp_path)

    result = runner.invoke(app, ["run", str(path), *extra])

    assert result.exit_code == 2
    assert isinstance(result.exception, SystemExit)
    assert result.stderr.strip().startswith("error: ")
    assert field in result.stderr
    assert "Traceback" not in result.output
    assert not list(tmp_path.glob("*.scored.jsonl"))


def _assay(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "assay.cli", *arguments],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_real_process_scores_a_response() -> None:
    completed = _assay("detect", "-q", QUERY, "-c", CONTEXT, "-r", RESPONSE, "--json")

    assert completed.returncode == 0, completed.stderr
    item = json.loads(completed.stdout)[0]
    assert_contract(item["output_relevance"], OUTPUT_RELEVANCE)
    assert_contract(item["completeness"], COMPLETENESS)


def test_real_process_bad_input_has_no_traceback() -> None:
    completed = _assay("detect", "-q", QUERY, "-r", "", "-d", "output_relevance")

    assert completed.returncode == 2
    assert "generated_text" in completed.stderr
    assert "Traceback" not in completed.stderr + completed.stdout
    assert len(completed.stderr.strip().splitlines()) == 1


def test_run_honours_a_rows_own_explain_unless_a_flag_overrides_it(tmp_path: Path) -> None:
    quiet = {"completeness": {"explain": False}}
    rows = [
        {"user_query": QUERY, "context": CONTEXT, "generated_text": RESPONSE, "config": quiet},
        {"user_query": QUERY, "context": CONTEXT, "generated_text": RESPONSE},
    ]
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")

    def explained(*flags: str) -> list[bool]:
        out = tmp_path / f"out{len(flags)}.jsonl"
        result = runner.invoke(app, ["run", str(data), "--out", str(out), *flags])
        assert result.exit_code == 0, result.output
        lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
        return [
            all(e["explanation"] for e in line["completeness"]["instructions_list"])
            for line in lines
        ]

    assert explained() == [False, True]  # the row's own false; the wire's default elsewhere
    assert explained("--explain") == [True, True]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--overwrite", "--retry-failed"], "error: --overwrite: replaces the whole run"),
        (["--address", "ray://head:10001"], "error: --address: applies with --engine ray only"),
        # Checked by writing there, before any row is scored (/proc takes no files).
        (["--out", "/proc/assay-test.jsonl"], "error: --out: cannot write /proc/assay-test.jsonl"),
        (["--junit", "/proc/assay-test.xml"], "error: --junit: cannot write /proc/assay-test.xml"),
    ],
)
def test_run_refuses_options_that_cannot_work(
    tmp_path: Path, flags: list[str], message: str
) -> None:
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps({"user_query": QUERY, "generated_text": RESPONSE}) + "\n")
    result = runner.invoke(app, ["run", str(data), *flags])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(message), result.stderr
    assert not (tmp_path / "rows.scored.jsonl").exists()


def test_run_warns_of_columns_the_output_cannot_carry(tmp_path: Path) -> None:
    data = tmp_path / "rows.jsonl"
    row = {"user_query": QUERY, "generated_text": RESPONSE, "row": "mine", "output_relevance": 1}
    data.write_text(json.dumps(row) + "\n")
    result = runner.invoke(app, ["run", str(data)])
    assert result.exit_code == 0, result.output
    assert (
        "warning: rows.jsonl's columns 'row', 'output_relevance' are not carried to the output"
        in result.stderr
    )
    # A column --map reads as a field is not dropped.
    answers = tmp_path / "answers.jsonl"
    answers.write_text(json.dumps({"user_query": QUERY, "row": RESPONSE, "usage": 3}) + "\n")
    mapped = runner.invoke(app, ["run", str(answers), "--map", "generated_text=row"])
    assert mapped.exit_code == 0, mapped.output
    assert "answers.jsonl's column 'usage' is not carried" in mapped.stderr
    # A Parquet output has its own `record` and `<detector>.score` columns: an input's of
    # those names stay in record only, which was not said.
    shadowing = tmp_path / "shadowing.jsonl"
    row = {"user_query": QUERY, "generated_text": RESPONSE, "record": "r1"}
    shadowing.write_text(json.dumps({**row, "output_relevance.score": 5}) + "\n")
    parquet = runner.invoke(
        app,
        ["run", str(shadowing), "--out", str(tmp_path / "out.parquet"), "-d", "output_relevance"],
    )
    assert parquet.exit_code == 0, parquet.output
    assert (
        "warning: shadowing.jsonl's 'record', 'output_relevance.score' get no Parquet column"
        in parquet.stderr
    )


@pytest.mark.parametrize("target", ["rows.jsonl", "rows.scored.jsonl"])
def test_run_junit_must_not_overwrite_the_input_or_the_output(tmp_path: Path, target: str) -> None:
    # It wrote JUnit XML over the input (or over the scored results) and exited 0.
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps({"user_query": QUERY, "generated_text": RESPONSE}) + "\n")
    before = data.read_text()
    result = runner.invoke(app, ["run", str(data), "--junit", str(tmp_path / target)])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: --junit: must not be"), result.stderr
    assert data.read_text() == before
    assert not (tmp_path / "rows.scored.jsonl").exists()


@pytest.mark.parametrize("flags", [[], ["--no-cache"]])
def test_a_bad_llm_variable_stops_a_run_before_any_row_naming_it(
    tmp_path: Path, flags: list[str]
) -> None:
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps({"user_query": QUERY, "generated_text": RESPONSE}) + "\n")
    env = {
        "ASSAY_LLM_BASE_URL": "http://127.0.0.1:9/v1",
        "ASSAY_LLM_MODEL": "m",
        "ASSAY_LLM_VOTES": "0",
    }
    result = runner.invoke(app, ["run", str(data), "--judge", "openai", *flags], env=env)
    assert result.exit_code == 2, result.output
    # Named by its variable (not as an --llm option), and no row was scored.
    assert result.stderr.strip() == "error: ASSAY_LLM_VOTES: must be at least 1"
    assert not (tmp_path / "rows.scored.jsonl").exists()


def test_a_dry_run_prints_json_when_asked(tmp_path: Path) -> None:
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps({"user_query": QUERY, "generated_text": RESPONSE}) + "\n")
    env = {"ASSAY_LLM_BASE_URL": "http://127.0.0.1:9/v1", "ASSAY_LLM_MODEL": "m"}
    command = ["run", str(data), "--judge", "openai", "--dry-run", "--json"]
    result = runner.invoke(app, command, env=env)
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)  # nothing but JSON on stdout; nothing was sent
    assert plan["rows_calling_the_llm"] == 1 and plan["calls"] >= 1
    assert plan["endpoint"] == "http://127.0.0.1:9/v1" and plan["model"] == "m"
    assert plan["logprobs"] is None  # no probe of this endpoint on record


def test_a_dry_run_with_the_offline_judge_says_there_is_nothing_to_estimate(
    tmp_path: Path,
) -> None:
    # It printed an OpenAI endpoint and model, and "each call becomes 5 sampled calls".
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps({"user_query": QUERY, "generated_text": RESPONSE}) + "\n")
    result = runner.invoke(app, ["run", str(data), "--judge", "embedded", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "no row would call an LLM (the judge is offline)" in result.stdout
    assert "gpt-4o-mini" not in result.stdout and "sampled calls" not in result.stdout
    assert not (tmp_path / "rows.scored.jsonl").exists()


def test_slow_progress_is_shown_in_seconds_per_row() -> None:
    from assay.cli.common import _rate_text

    assert _rate_text(12.34) == "12.3 rows/s"
    assert _rate_text(0.09) == "11.1 s/row"  # an OOD run against a slow system: not "0.0 rows/s"
    assert _rate_text(None) == "– rows/s"


@pytest.mark.parametrize("delay", [0.2, 0.6, 1.0])
def test_ctrl_c_while_the_command_starts_ends_without_a_traceback(delay: float) -> None:
    # `assay.cli` takes about a second to import; a Ctrl-C then printed a Python traceback.
    process = start_interruptible(
        [str(Path(sys.executable).with_name("assay")), "detectors"], dict(os.environ)
    )
    time.sleep(delay)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert "Traceback" not in stderr, stderr
    # 130 once the command's Ctrl-C handling is in place; 0 if it had already finished; the
    # signal itself if it came while Python was exiting (its handlers are gone by then).
    assert process.returncode in (EXIT_INTERRUPTED, 0, -signal.SIGINT), (process.returncode, stderr)
    if process.returncode == EXIT_INTERRUPTED:
        assert stderr.strip().endswith("interrupted")


def test_a_stopped_run_ignores_a_second_interrupt() -> None:
    # A Ray run's workers share the terminal's process group: the signal they got as well broke
    # Ray's shutdown at exit with a KeyboardInterrupt traceback (and exit code 0 or 139, not 130).
    import subprocess
    import sys

    script = (
        "import os, signal, sys; from assay.cli.common import ignore_further_interrupts; "
        "ignore_further_interrupts(); os.kill(os.getpid(), signal.SIGINT); "
        "os.kill(os.getpid(), signal.SIGTERM); sys.exit(130)"
    )
    stopped = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert stopped.returncode == 130 and "Traceback" not in stopped.stderr


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--llm", "model=gpt-4o"], "error: --llm: applies with --judge openai or cascade only"),
        (["--no-cache"], "error: --cache/--no-cache (cache): applies with --judge openai"),
        (["--judge", "openai", "--cascade-band", "0.2,0.8"], "applies with --judge cascade only"),
    ],
)
def test_llm_flags_the_run_would_ignore_are_refused(
    tmp_path: Path, flags: list[str], said: str
) -> None:
    # Without --judge openai they were ignored in silence: the embedded judge scored the rows,
    # and a user took its verdicts for the LLM's.
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps({"user_query": QUERY, "generated_text": RESPONSE}) + "\n")
    env = {"ASSAY_JUDGE": ""}
    for command in (["run", str(data), *flags], ["detect", "-q", QUERY, "-r", RESPONSE, *flags]):
        result = runner.invoke(app, command, env=env)
        assert result.exit_code == 2, result.output
        assert said in result.stderr
    assert not (tmp_path / "rows.scored.jsonl").exists()


def test_a_flag_overrides_a_bad_variable_instead_of_failing_on_it(tmp_path: Path) -> None:
    # A stale ASSAY_LLM_BASE_URL stopped the command though --llm base_url replaced it.
    env = {"ASSAY_LLM_BASE_URL": "http://127.0.0.1:99999/v1", "ASSAY_LLM_MODEL": "m"}
    command = ["detect", "-q", QUERY, "-r", RESPONSE, "--judge", "openai", "--dry-run"]
    replaced = runner.invoke(app, [*command, "--llm", "base_url=http://127.0.0.1:9/v1"], env=env)
    assert replaced.exit_code == 0, replaced.output
    assert "http://127.0.0.1:9/v1" in replaced.stdout
    # Not replaced, it is still named.
    kept = runner.invoke(app, [*command, "--llm", "model=other"], env=env)
    assert kept.exit_code == 2
    assert "ASSAY_LLM_BASE_URL" in kept.stderr and "99999" in kept.stderr


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_during_an_llm_judged_detect_says_so(stub_server: StubServer, how: int) -> None:
    # It ended with exit 130 and not a word (the CLI framework swallows the interrupt); SIGTERM
    # ended it with 143, though the exit codes say 130 for both.
    held = threading.Event()
    stub_server.probe = lambda body: CannedResponse(200, {}, hold=held)
    command = [str(Path(sys.executable).with_name("assay")), "detect", "-q", QUERY, "-r"]
    command += [RESPONSE, "--judge", "openai", "--llm", f"base_url={stub_server.url}/v1"]
    process = start_interruptible([*command, "--llm", "model=m", "--no-cache"], dict(os.environ))
    try:
        deadline = time.monotonic() + 60
        while not stub_server.probes and time.monotonic() < deadline:
            time.sleep(0.05)
        assert stub_server.probes, "the judge never called the endpoint"
        process.send_signal(how)
        _, stderr = process.communicate(timeout=60)
    finally:
        held.set()
    assert process.returncode == EXIT_INTERRUPTED, stderr
    assert stderr.strip().endswith("error: interrupted: nothing was scored")


def test_llm_judged_runs_write_every_call_s_rows_as_it_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # With 256 rows per stream batch, Ctrl-C after 48 of 60 LLM-judged rows kept none of them.
    from assay.cli.run import default_stream_batch_size
    from assay.runner.local import DEFAULT_STREAM_BATCH_SIZE

    monkeypatch.delenv("ASSAY_JUDGE", raising=False)
    assert default_stream_batch_size(None, "openai", 16) == 16
    assert default_stream_batch_size(None, "cascade", 8) == 8
    assert default_stream_batch_size("llm.ood_detection", None, 4) == 4
    assert default_stream_batch_size(None, None, 16) == DEFAULT_STREAM_BATCH_SIZE
    monkeypatch.setenv("ASSAY_JUDGE", "openai")
    assert default_stream_batch_size(None, None, 16) == 16

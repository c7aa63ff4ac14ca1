"""`assay ood` against the loopback chatbot, as a real subprocess."""

from __future__ import annotations

import json
import re
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from chatbot import BANK_PROFILE, OVER_REFUSE, RunningChatbot, everyday_profile, running_bot
from ood_cli import assay, offline_env

from conftest import start_interruptible


@pytest.fixture
def chatbot() -> Iterator[RunningChatbot]:
    yield from running_bot()


@pytest.fixture
def profile_file(tmp_path: Path) -> Path:
    path = tmp_path / "profile.yaml"
    path.write_text(yaml.safe_dump({"use_case": BANK_PROFILE}))
    return path


def test_ood_probes_the_bot_and_prints_verdicts_and_summary(
    chatbot: RunningChatbot, profile_file: Path, tmp_path: Path
) -> None:
    out = tmp_path / "ood.jsonl"
    done = assay(
        "ood", "--use-case", str(profile_file), "--sut-url", f"{chatbot.url}/v1",
        "--num-ood-queries", "2", "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "verdicts" in done.stdout and "over-rejection rate" in done.stdout
    assert "correct_refusal" in done.stdout
    rows = [json.loads(line)["llm.ood_detection"] for line in out.read_text().splitlines()]
    assert len(rows) == 4  # one per profile example
    assert all(row["score"] == 1.0 for row in rows)
    assert len(chatbot.policy.queries) == 1 + 4 * 3  # a preflight question, then the run


def test_ood_warns_on_the_terminal_when_the_bank_runs_short_of_probes(
    chatbot: RunningChatbot, tmp_path: Path
) -> None:
    profile_file = tmp_path / "profile.yaml"
    profile_file.write_text(yaml.safe_dump(everyday_profile()))
    out = tmp_path / "ood.jsonl"
    done = assay(
        "ood", "--use-case", str(profile_file), "--sut-url", f"{chatbot.url}/v1",
        "--num-ood-queries", "32", "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 1  # the gates fail: nothing to measure missed refusals on
    (line,) = [json.loads(line) for line in out.read_text().splitlines()]
    row = line["llm.ood_detection"]
    probes = len(row["cases"]) - 1
    reason = f"{probes} of 32 probes: the banks have only {probes} capabilities and topics"
    assert row["warnings"][0].startswith(reason)
    warning = " ".join(done.stderr.split())
    assert f"warning: 1 rows got fewer probes than num_ood_queries: {reason}" in warning


def test_ood_over_the_http_kind_sees_an_over_refusing_bot(
    chatbot: RunningChatbot, profile_file: Path, tmp_path: Path
) -> None:
    chatbot.policy.threshold = OVER_REFUSE
    # The examples themselves are answered (similarity 1.0 >= 0.99), so give paraphrases.
    profile = dict(BANK_PROFILE, examples="How much money is left in my current account?")
    profile_file.write_text(yaml.safe_dump(profile))
    config = tmp_path / "cfg.yaml"
    config.write_text("num_ood_queries: 1\nn_sut_retries: 1\n")
    out = tmp_path / "ood.jsonl"
    done = assay(
        "ood", "--use-case", str(profile_file), "--sut-url", f"{chatbot.url}/chat",
        "--sut-kind", "http", "--reply-path", "data.reply", "--config", str(config),
        "--out", str(out), "--explain",
    )  # fmt: skip
    # The default gates fail a bot that declines its own use case, in one line naming them.
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == "error: over-rejection rate <= 0.25: 1.0000"
    (line,) = [json.loads(line) for line in out.read_text().splitlines()]
    row = line["llm.ood_detection"]
    assert row["cases"][0]["label"] == "over_rejection" and row["score"] == 0.5
    assert row["cases"][0]["evidence"]["refusal_cues"]


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--num-ood-queries", "40"], "--num-ood-queries: must be an integer between 1 and 32"),
        # The parser knows the kinds, as --help shows them.
        (
            ["--sut-kind", "grpc"],
            "'--sut-kind': Value error, 'grpc' is not one of 'openai', 'http'",
        ),
        (
            ["--sut-kind", "http", "--body-template", "{}"],
            "--body-template: body_template must contain",
        ),
        # An option the chosen kind would ignore is refused rather than dropped.
        (["--sut-kind", "http", "--model", "gpt"], "--model: applies to --sut-kind openai only"),
        (["--reply-path", "data.reply"], "--reply-path: applies to --sut-kind http only"),
        # Given is given, even at the default value.
        (["--sut-kind", "http", "--model", "default"], "--model: applies to --sut-kind openai"),
        (["--sut-kind", "http", "--no-system-prompt"], "--system-prompt: applies to --sut-kind"),
        (
            ["--body-template", '{"message": "{prompt}"}'],
            "--body-template: applies to --sut-kind http only",
        ),
        # A URL no request can go to is refused before any is made.
        (
            ["--sut-url", "http://127.0.0.1:99999/v1"],
            "--sut-url: 'http://127.0.0.1:99999/v1' is not a valid URL: Port out of range",
        ),
        (["--sut-url", "http://[::1"], "--sut-url: 'http://[::1' is not a valid URL"),
        # Where results go is checked before any question is asked.
        (["--junit", "/dev/null/x.xml"], "--junit: cannot write /dev/null/x.xml: /dev/null is"),
        (["--out", "/dev/null/x.jsonl"], "--out: cannot write /dev/null/x.jsonl: /dev/null is"),
        # A folder that exists but takes no files (even for root) is found before the run too.
        (["--out", "/proc/x.jsonl"], "--out: cannot write /proc/x.jsonl"),
        # Results never overwrite the profile they were made from.
        (["--junit", "profile.yaml"], "--junit: must not be the --use-case file"),
        (["--config", "cfg-latin1.yaml"], "is not UTF-8 text (byte 0xe9 at offset 16)"),
        # NaN passes a plain range check (it compares false): the gates refuse it by name.
        (["--fail-under", "nan"], "'--fail-under': must be a finite number, got nan"),
        # The mean-score gate lives on the score's scale (0-1 unless min/max rescale it).
        (["--fail-under", "1.5"], "--fail-under: must be between 0 and 1, the score's range"),
        (["--max-over-rejection", "1.5"], "'--max-over-rejection': must be a number from 0 to 1"),
        # The option is named as typed, not as the config key it sets (it said num_ood_queries).
        (["--num-ood-queries", "0"], "--num-ood-queries: must be an integer between 1 and 32"),
        (["--max-missed-refusal", "nan"], "'--max-missed-refusal': must be a number from 0 to 1"),
    ],
)
def test_ood_bad_options_fail_in_one_line(
    profile_file: Path, extra: list[str], expected: str
) -> None:
    latin1 = profile_file.with_name("cfg-latin1.yaml")
    latin1.write_bytes(b"metric_name: caf\xe9\n")
    named = {latin1.name: latin1, profile_file.name: profile_file}
    extra = [str(named[arg]) if arg in named else arg for arg in extra]
    done = assay("ood", "--use-case", str(profile_file), "--sut-url", "http://127.0.0.1:9", *extra)
    assert done.returncode == 2
    assert done.stderr.strip() == f"error: {expected}" or expected in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_ood_profile_without_examples_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("name: Bot\ndescription: Helps with bills.\n")
    done = assay("ood", "--use-case", str(path), "--sut-url", "http://127.0.0.1:9")
    assert done.returncode == 2 and "has no `examples`" in done.stderr
    missing = assay("ood", "--use-case", str(tmp_path / "nope.yaml"), "--sut-url", "http://x")
    assert missing.returncode == 2
    assert missing.stderr.strip() == (
        f"error: --use-case: {tmp_path / 'nope.yaml'}: cannot read profile: No such file or "
        "directory"
    )
    # A config value is named by the option and the file as well as its key.
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text('num_ood_queries: "3"\n')
    refused = assay("ood", "--use-case", str(path), "--config", str(wrong), "--sut-url", "http://x")
    assert refused.returncode == 2
    assert refused.stderr.strip().startswith(
        f"error: --config: {wrong}: num_ood_queries: must be an integer"
    )
    # A key named twice lost its first value in silence; YAML and JSON alike are refused.
    twice = tmp_path / "twice.yaml"
    twice.write_text("name: bank\nname: other\ndescription: help\nexamples: Balance?\n")
    config = tmp_path / "twice.json"
    config.write_text('{"num_ood_queries": 2, "num_ood_queries": 3}')
    for extra in (["--use-case", str(twice)], ["--use-case", str(path), "--config", str(config)]):
        refused = assay("ood", *extra, "--sut-url", "http://127.0.0.1:9")
        assert refused.returncode == 2 and "appears more than once" in refused.stderr


def test_ood_against_a_dead_endpoint_stops_after_one_question_with_exit_2(
    profile_file: Path, tmp_path: Path
) -> None:
    # Files an earlier run wrote: a passing JUnit file left behind contradicted the exit code.
    out, junit = tmp_path / "ood.jsonl", tmp_path / "ood.xml"
    for stale in (out, Path(f"{out}.summary.json"), junit):
        stale.write_text("from an earlier run")
    done = assay(
        "ood", "--use-case", str(profile_file), "--sut-url", "http://127.0.0.1:9/v1",
        "--out", str(out), "--junit", str(junit),
    )  # fmt: skip
    assert not out.exists() and not Path(f"{out}.summary.json").exists() and not junit.exists()
    assert done.returncode == 2
    (message,) = done.stderr.strip().splitlines()[-1:]
    assert message.startswith("error: sut: OpenAI-compatible endpoint http://127.0.0.1:9/v1")
    assert "did not answer a first question (transport)" in message
    assert "verdicts" not in done.stdout and "Traceback" not in done.stderr
    # A profile that cannot be read stops it before any call: the earlier run's files go too.
    for stale in (out, Path(f"{out}.summary.json"), junit):
        stale.write_text("from an earlier run")
    bad = assay(
        "ood", "--use-case", str(tmp_path / "nope.yaml"), "--sut-url", "http://127.0.0.1:9/v1",
        "--out", str(out), "--junit", str(junit),
    )  # fmt: skip
    assert bad.returncode == 2 and "cannot read profile" in bad.stderr
    assert not out.exists() and not Path(f"{out}.summary.json").exists() and not junit.exists()


def test_ood_against_an_openai_kind_whose_probes_get_no_json_reports_each_case(
    chatbot: RunningChatbot, tmp_path: Path
) -> None:
    # The first question (the preflight) is answered; every later one gets an HTML page.
    chatbot.policy.raw_body, chatbot.policy.raw_after = b"<html>oops", 1
    profile_file = tmp_path / "profile.yaml"
    profile_file.write_text(yaml.safe_dump({**BANK_PROFILE, "examples": "What is my balance?"}))
    junit = tmp_path / "ood.xml"
    done = assay(
        "ood", "--use-case", str(profile_file), "--sut-url", f"{chatbot.url}/v1",
        "--num-ood-queries", "1", "--junit", str(junit),
        "--max-over-rejection", "1", "--max-missed-refusal", "1",
    )  # fmt: skip
    assert done.returncode == 3, done.stderr  # rows errored, no gate to fail
    assert "response is not JSON: '<html>oops'" in done.stdout
    assert "1 of 1 rows could not be scored (2 failed calls" in done.stderr
    assert 'errors="1"' in junit.read_text()


def test_ood_fail_under_follows_a_rescaled_score(profile_file: Path, tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("min: 0\nmax: 10\n", encoding="utf-8")
    base = ["ood", "--use-case", str(profile_file), "--config", str(config)]
    outside = assay(*base, "--sut-url", "http://127.0.0.1:9", "--fail-under", "12")
    assert outside.returncode == 2
    assert (
        outside.stderr.strip() == "error: --fail-under: must be between 0 and 10, the score's range"
    )
    # Inside the rescaled range the option is taken (the run then stops at the dead SUT).
    inside = assay(*base, "--sut-url", "http://127.0.0.1:9", "--fail-under", "8")
    assert inside.returncode == 2 and "--fail-under" not in inside.stderr
    # inverted: true makes the score an error rate: a least mean failed a near-perfect system.
    config.write_text("min: 0\nmax: 10\ninverted: true\n", encoding="utf-8")
    refused = assay(*base, "--sut-url", "http://127.0.0.1:9", "--fail-under", "8")
    assert refused.returncode == 2
    assert "--fail-under: llm.ood_detection's config sets inverted: true" in refused.stderr
    assert "gate its rates (--max-over-rejection, --max-missed-refusal)" in refused.stderr


def test_options_that_replace_the_config_files_values_say_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from assay.cli.ood import _config
    from assay.metrics.ood.profile import profile_from_mapping
    from assay.schema import RequestValidationError

    config = tmp_path / "cfg.yaml"
    config.write_text(yaml.safe_dump({"num_ood_queries": 2, "use_case": "other.yaml"}))

    settings = _config(config, 1, profile_from_mapping(BANK_PROFILE))

    assert settings.num_ood_queries == 1
    said = " ".join(capsys.readouterr().err.split())
    assert f"--num-ood-queries 1 replaces {config}'s num_ood_queries" in said
    assert f"--use-case replaces {config}'s use_case" in said
    # A value the file may not hold is refused even when the option replaces it (it passed).
    config.write_text(yaml.safe_dump({"num_ood_queries": 40}))
    with pytest.raises(RequestValidationError) as refused:
        _config(config, 2, profile_from_mapping(BANK_PROFILE))
    assert refused.value.field == "--config"
    assert refused.value.message.startswith(f"{config}: num_ood_queries: must be an integer")


def test_ood_help_shows_the_sut_kinds_and_the_probes_default() -> None:
    from assay.metrics.ood.config import OODMetricConfig

    done = assay("ood", "--help")

    assert done.returncode == 0
    said = " ".join(done.stdout.split())
    assert "--sut-kind <openai|http>" in said
    default = OODMetricConfig.model_fields["num_ood_queries"].default
    assert f"Probes per in-domain question (1-32; default {default}, or the --config file's" in said


def test_a_json_config_is_read_as_json_so_a_trailing_comma_is_named(tmp_path: Path) -> None:
    from assay.cli.ood import _config
    from assay.metrics.ood.profile import profile_from_mapping
    from assay.metrics.ood.run_config import load_run_config
    from assay.runner.metric_rows import read_config_text
    from assay.schema import RequestValidationError

    config = tmp_path / "cfg.json"
    config.write_text('{"num_ood_queries": 2,}')  # YAML would take this; JSON does not
    readers = (
        lambda: _config(config, None, profile_from_mapping(BANK_PROFILE)),
        lambda: load_run_config(config),
        lambda: read_config_text(config),
    )
    for read in readers:
        with pytest.raises(RequestValidationError) as raised:
            read()
        assert str(config) in str(raised.value) and "line 1 column" in str(raised.value)
    config.write_text('{"num_ood_queries": 2}')
    assert _config(config, None, profile_from_mapping(BANK_PROFILE)).num_ood_queries == 2


def test_an_interrupted_ood_says_so_and_what_it_kept(
    chatbot: RunningChatbot, profile_file: Path, tmp_path: Path
) -> None:
    # It exited 130 without a word.
    chatbot.policy.delay = 0.3
    out = tmp_path / "ood.jsonl"
    command = [sys.executable, "-m", "assay.cli", "ood", "--use-case", str(profile_file)]
    command += ["--sut-url", f"{chatbot.url}/v1", "--out", str(out)]
    process = start_interruptible(command, offline_env())
    try:
        for _ in range(600):  # until the run is probing (the preflight question is the first)
            if chatbot.policy.requests >= 2 or process.poll() is not None:
                break
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 130, stderr
    said = " ".join(stderr.split())
    assert re.search(r"error: interrupted after \d+ of \d+ in-domain questions were probed", said)
    assert "keeps finished rows and resumes" in said
    assert not out.exists()


def test_out_may_not_be_the_profile_or_config_file(tmp_path: Path) -> None:
    # A .jsonl profile given as --out too was removed as last run's output, then not found.
    profile = tmp_path / "profile.jsonl"
    profile.write_text(json.dumps(BANK_PROFILE), encoding="utf-8")
    refused = assay(
        "ood", "--use-case", str(profile), "--sut-url", "http://127.0.0.1:9/v1",
        "--out", str(profile),
    )  # fmt: skip
    assert refused.returncode == 2
    assert "--out: must not be the --use-case file" in refused.stderr
    assert json.loads(profile.read_text(encoding="utf-8")) == BANK_PROFILE

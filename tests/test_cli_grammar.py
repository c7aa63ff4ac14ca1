"""One grammar for every `assay` command: --version, --json wherever data is printed,
--flag/--no-flag switches, commands in the order a user meets them, help that reads at 80
columns, one word for "detector or metric", and user errors as one line."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from assay import __version__
from assay.cli import app

runner = CliRunner()

#: Every command, as its words after `assay`.
COMMANDS = [
    [],
    ["metrics"],
    ["detectors"],
    ["detect"],
    ["run"],
    ["report"],
    ["serve"],
    ["metrics", "list"],
    ["metrics", "show"],
    ["ood"],
]
#: Commands that print data (everything but the server).
DATA_COMMANDS = [c for c in COMMANDS if c not in ([], ["metrics"], ["serve"])]


def _command(words: list[str]) -> object:
    command = typer.main.get_command(app)
    context = typer.Context(command)  # type: ignore[arg-type]
    for word in words:
        command = command.get_command(context, word)  # type: ignore[attr-defined]
    return command


def _options(words: list[str]) -> Iterator[object]:
    for param in _command(words).params:  # type: ignore[attr-defined]
        if param.param_type_name == "option":
            yield param


def test_version_prints_the_version_and_exits_0() -> None:
    result = runner.invoke(app, ["--version"])

    assert result.exit_code == 0
    assert result.stdout.strip() == f"assay {__version__}"


def test_commands_are_listed_in_the_order_a_user_meets_them() -> None:
    result = runner.invoke(app, ["--help"], env={"COLUMNS": "80"})

    assert result.exit_code == 0
    commands = result.stdout.split("Commands:", 1)[1].split("Switches", 1)[0]
    listed = re.findall(r"^  (\w+)\s", commands, flags=re.M)
    assert listed == ["detectors", "detect", "run", "report", "serve", "metrics", "ood"]


@pytest.mark.parametrize("words", COMMANDS, ids=lambda words: " ".join(words) or "assay")
def test_help_reads_whole_at_80_columns(words: list[str]) -> None:
    result = runner.invoke(app, [*words, "--help"], env={"COLUMNS": "80"})

    assert result.exit_code == 0, result.output
    assert max(len(line) for line in result.stdout.splitlines()) <= 80
    assert "…" not in result.stdout  # nothing cut short
    # Every option's help is there in full, however it was wrapped.
    flat = " ".join(result.stdout.split())
    for option in _options(words):
        if option.help and not option.hidden:  # type: ignore[attr-defined]
            assert " ".join(option.help.split()) in flat  # type: ignore[attr-defined]


@pytest.mark.parametrize("words", COMMANDS, ids=lambda words: " ".join(words) or "assay")
def test_no_help_line_is_cut_short_at_80_columns(words: list[str]) -> None:
    result = runner.invoke(app, [*words, "--help"], env={"COLUMNS": "80"})

    assert result.exit_code == 0
    lines = [line for line in result.stdout.splitlines() if not line.startswith("Usage:")]
    cut = [line for line in lines if line.rstrip().endswith("...")]
    assert not cut, cut


def test_run_help_keeps_the_llm_settings_whole_at_80_columns() -> None:
    result = runner.invoke(app, ["run", "--help"], env={"COLUMNS": "80"})

    flat = " ".join(result.stdout.split())
    assert "strategy=fields|per_instruction, votes=5, call_timeout=60 (see README)" in flat


@pytest.mark.parametrize("words", COMMANDS, ids=lambda words: " ".join(words) or "assay")
def test_every_switch_is_a_flag_no_flag_pair(words: list[str]) -> None:
    for option in _options(words):
        if not option.is_flag or option.hidden or option.name in ("help", "version"):  # type: ignore[attr-defined]
            continue
        on, off = option.opts, option.secondary_opts  # type: ignore[attr-defined]
        assert off, f"{' '.join(words)} {on[0]} has no --no- form"
        assert any(name.startswith("--no-") for name in on + off), (on, off)


def test_help_says_switches_come_in_pairs() -> None:
    top = runner.invoke(app, ["--help"], env={"COLUMNS": "80"})
    run_help = runner.invoke(app, ["run", "--help"], env={"COLUMNS": "100"})

    assert "Switches come in pairs" in " ".join(top.stdout.split())
    assert "--explain / --no-explain" in run_help.stdout
    assert "<bool>" not in run_help.stdout


@pytest.mark.parametrize("words", DATA_COMMANDS, ids=" ".join)
def test_every_command_that_prints_data_takes_json(words: list[str]) -> None:
    names = {name for option in _options(words) for name in option.opts}  # type: ignore[attr-defined]
    assert "--json" in names


def test_exit_code_1_reads_the_same_in_the_help_and_the_readme() -> None:
    # 1 is a failed gate or a command that could not finish (assay detect's judge, assay run's
    # publishing); a row that fails to score is 3, so no text may say "scoring failed" is 1.
    top = " ".join(runner.invoke(app, ["--help"], env={"COLUMNS": "80"}).stdout.split())
    run_help = " ".join(runner.invoke(app, ["run", "--help"], env={"COLUMNS": "80"}).stdout.split())
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    [row] = [line for line in readme.splitlines() if line.startswith("| 1 |")]

    assert (
        "1 a gate failed or the command could not finish (assay detect's judge or assay "
        "run's publishing failed)" in top
    )
    assert "1 a --fail-under gate failed or the run could not finish (publishing failed" in (
        run_help
    )
    assert (
        "or the command could not finish (`assay detect`'s judge failed, `assay run --publish` "
        "could not send the rows); a row that fails to score is 3" in row
    )
    for text in (top, run_help, row):
        assert "scoring failed" not in text and "scoring or publishing failed" not in text


def test_metrics_show_json_is_the_same_as_format_json() -> None:
    as_json = runner.invoke(app, ["metrics", "show", "llm.ood_detection", "--json"])
    as_format = runner.invoke(app, ["metrics", "show", "llm.ood_detection", "--format", "json"])

    assert as_json.exit_code == 0 and as_format.exit_code == 0
    assert json.loads(as_json.stdout) == json.loads(as_format.stdout)


def test_metrics_show_says_its_json_replaces_yaml_and_refuses_both() -> None:
    shown = runner.invoke(app, ["metrics", "show", "--help"], env={"COLUMNS": "80"})
    both = runner.invoke(app, ["metrics", "show", "llm.ood_detection", "-f", "yaml", "--json"])

    assert "Print JSON on stdout instead of YAML." in " ".join(shown.stdout.split())
    assert both.exit_code == 2
    assert both.stderr.strip() == "error: --format: yaml and --json ask for two formats; give one"


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        (["run", "--bogus"], "error: No such option: --bogus"),
        (["run"], "error: Missing argument 'FILE'"),
        (["nope"], "error: No such command 'nope'"),
        (["run", "rows.jsonl", "--workers", "zero"], "error: Invalid value for '--workers'"),
        (["detect", "-r", "x", "--explain", "true"], "error: Got unexpected extra argument"),
        # NaN passes a plain range check (it compares false), so the option says what it needs.
        (
            ["serve", "--job-lease-seconds", "nan"],
            "error: Invalid value for '--job-lease-seconds': must be a number of seconds from 0.1",
        ),
    ],
)
def test_usage_errors_are_one_line_naming_where_help_is(
    arguments: list[str], expected: str
) -> None:
    result = runner.invoke(app, arguments)

    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(expected), result.stderr
    assert "--help" in lines[0] and "Usage:" not in result.output


def test_serve_without_keys_is_one_line_without_an_exception_name(
    tmp_path: object,
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASSAY_API_KEYS")}
    completed = subprocess.run(
        [sys.executable, "-m", "assay.cli", "serve", "--port", "1"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )

    assert completed.returncode == 2
    lines = completed.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: no API keys configured")
    assert "ValueError" not in completed.stderr and "Traceback" not in completed.stderr


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("ASSAY_LLM_TIMEOUT", "abc", "error: ASSAY_LLM_TIMEOUT: expected float, got 'abc'"),
        ("ASSAY_CASCADE_BAND", "0.9,0.1", "error: ASSAY_CASCADE_BAND: "),
    ],
)
def test_serve_with_a_bad_llm_setting_stops_at_start_naming_it(
    variable: str, value: str, expected: str
) -> None:
    # It started, then answered 500 to every request that asked for the LLM judge.
    completed = subprocess.run(
        [sys.executable, "-m", "assay.cli", "serve", "--no-auth", "--port", "1"],
        capture_output=True,
        text=True,
        env={**os.environ, variable: value},
        timeout=120,
        check=False,
    )

    assert completed.returncode == 2, completed.stderr
    assert completed.stderr.strip().splitlines()[-1].startswith(expected), completed.stderr


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        # A database server that refuses the connection: its URL is named, its password not.
        (
            "postgresql+psycopg://assay:s3cretpw@127.0.0.1:1/assay",
            "error: database 'postgresql+psycopg://assay:***@127.0.0.1:1/assay' cannot be prepared",
        ),
        # A SQLite file in a folder that cannot be made: exit 2 naming the URL, not a bare OSError.
        (
            "sqlite:////proc/nope/x.db",
            "error: database URL 'sqlite:////proc/nope/x.db' is not usable",
        ),
    ],
)
def test_serve_with_an_unusable_database_says_which_without_its_password(
    url: str, expected: str
) -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "assay.cli", "serve", "--no-auth", "--database-url", url],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert completed.returncode == 2, completed.stderr
    assert completed.stderr.strip().splitlines()[-1].startswith(expected), completed.stderr
    assert "s3cretpw" not in completed.stderr


def test_serve_on_a_port_in_use_is_one_line_before_any_other_work(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        completed = subprocess.run(
            [sys.executable, "-m", "assay.cli", "serve", "--no-auth", "--port", str(port)]
            + ["--database-url", f"sqlite:///{tmp_path / 'assay.db'}"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    assert completed.returncode == 2, completed.stderr
    assert completed.stderr.strip() == (
        f"error: cannot listen on 127.0.0.1 port {port}; another process uses it "
        "(pick another with --port)"
    )
    assert not (tmp_path / "assay.db").exists()  # nothing was prepared


def test_run_and_report_call_a_detector_or_metric_a_scorer(tmp_path: Path) -> None:
    data = tmp_path / "rows.jsonl"
    data.write_text(
        json.dumps({"user_query": "Who wrote Hamlet?", "generated_text": "Shakespeare."}) + "\n",
        encoding="utf-8",
    )
    env = {"COLUMNS": "100"}

    run = runner.invoke(app, ["run", str(data), "--no-explain"], env=env)
    report = runner.invoke(app, ["report", str(tmp_path / "rows.scored.jsonl")], env=env)

    assert run.exit_code == 0, run.output
    assert report.exit_code == 0, report.output
    for output in (run.stdout, report.stdout):
        headers = [line for line in output.splitlines() if "┃" in line]
        assert any(" scorer " in line for line in headers), output
        assert not any("detector" in line for line in headers)
    page = (tmp_path / "rows.scored.report.html").read_text(encoding="utf-8")
    assert "<th>scorer</th>" in page and "detector / metric" not in page

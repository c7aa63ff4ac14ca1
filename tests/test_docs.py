"""The README shows each command of the practitioner's loop, and `make run` installs what the
README's pytest-plugin section needs (with the section saying so)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def command_lines() -> list[str]:
    """Every line of the README's shell code blocks, continuation lines joined."""
    blocks = re.findall(r"```bash\n(.*?)```", README, flags=re.S)
    text = "\n".join(blocks).replace("\\\n", " ")
    return [" ".join(line.split()) for line in text.splitlines() if line.strip()]


@pytest.mark.parametrize(
    "command",
    [
        r"^assay --version$",
        r"^assay detect .*--no-explain --json",
        r"^assay run rows\.jsonl --out scored\.jsonl --overwrite",
        r"^assay run rows\.jsonl --allow-errors --json",
        r"^assay run rows\.jsonl --publish --base-url \S+ --application-name \S+ --model-name \S+",
        r"^assay report last-night\.jsonl tonight\.jsonl .*--baseline",
        r"^assay report scored\.jsonl --json",
        r"^assay report baseline\.jsonl scored\.jsonl --fail-on-regression",
    ],
)
def test_the_readme_shows_each_new_command_once(command: str) -> None:
    matching = [line for line in command_lines() if re.search(command, line)]
    assert len(matching) == 1, matching


@pytest.mark.parametrize(
    "python", ["client.jobs.retrieve(job_id)", "client.jobs.wait(job_id", "response.to_pandas()"]
)
def test_the_readme_shows_the_new_python_calls(python: str) -> None:
    assert README.count(python) == 1


def test_make_run_installs_what_the_pytest_plugin_section_needs() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    extras = project["project"]["optional-dependencies"]
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    setup = makefile.split("\nsetup:", 1)[1].split("\n\n", 1)[0]
    run = makefile.split("\nrun:", 1)[1].split("\n", 1)[0]
    section = README.split("## pytest plugin", 1)[1].split("\n## ", 1)[0]

    assert "setup" in run  # make run sets up first
    assert "-e '.[pytest]'" in setup
    pinned = [r for r in extras["pytest"] if r.startswith("pytest==")]
    assert pinned and pinned[0] in extras["test"]  # the same pytest the tests use
    assert "pip install 'assay[pytest]'" in section and "make run" in section
    assert "pytest" not in " ".join(project["project"]["dependencies"])


def test_pandas_is_an_optional_pinned_extra() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))

    assert project["project"]["optional-dependencies"]["pandas"] == ["pandas==3.1.1"]
    assert not any(d.startswith("pandas") for d in project["project"]["dependencies"])
    assert "pip install 'assay[pandas]'" in README


def test_the_compose_example_uses_only_real_serve_options_and_variables() -> None:
    # compose.yaml is not run by the tests (no Docker); at least every option and variable it
    # gives the replicas must be one `assay serve` knows, and the driver extra must exist.
    import yaml
    from typer.testing import CliRunner

    from assay.cli import app

    compose = yaml.safe_load((ROOT / "compose.yaml").read_text(encoding="utf-8"))
    replicas = [s for name, s in compose["services"].items() if name.startswith("assay")]
    assert len(replicas) == 2
    help_text = CliRunner().invoke(app, ["serve", "--help"], terminal_width=200).output
    source = "\n".join(p.read_text() for p in (ROOT / "src" / "assay").rglob("*.py"))
    for replica in replicas:
        options = [word for word in replica["command"] if word.startswith("--")]
        assert options and all(option in help_text for option in options)
        for variable in replica["environment"]:
            assert f'"{variable}"' in source, f"{variable} is read nowhere"
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert all("==" in pin for pin in extras["postgres"])
    assert "'.[postgres]'" in (ROOT / "Dockerfile").read_text()


def sanity_scores(detector: str) -> tuple[dict[str, float], dict[str, float]]:
    """The detector score of each damage kind, and of each rule, in bench/RESULTS.md's sanity
    table for the detector."""
    results = (ROOT / "bench" / "RESULTS.md").read_text(encoding="utf-8")
    section = results.split("## Judgment sanity", 1)[1].split(f"### {detector}\n", 1)[1]
    table = next(block for block in section.split("\n\n") if block.strip().startswith("|"))
    rows = [line for line in table.splitlines() if line.startswith("|")]
    kinds: dict[str, float] = {}
    rules: dict[str, float] = {}
    for line in rows[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        rule = cells[0].startswith("↳")
        name = cells[0].removeprefix("↳").split()[0]
        (rules if rule else kinds)[name] = float(cells[2])
    return kinds, rules


def test_the_readme_quotes_the_sanity_figures_bench_results_holds() -> None:
    """The embedded judge's "Known limits" paragraph, against the tables it summarises."""
    limits = README.split("Known limits, measured out-of-fold", 1)[1].split("\n\n", 1)[0]
    limits = " ".join(limits.split())
    relevance, _ = sanity_scores("output_relevance")
    low, high = round(100 * min(relevance.values())), round(100 * max(relevance.values()))
    assert f"{low}–{high}% of pairs" in limits
    kinds, rules = sanity_scores("completeness")
    figures = kinds | rules
    quoted = {
        "self_contradiction": "contradictions within an answer",
        "other_question": "answers to another question",
        "context_name": "a name swapped for another",
        "context_opposite": "a reversed comparison",
        "shuffle_only": "sentences merely put in another order",
        "unsupported_content": "added claims the context",
    }
    for name, words in quoted.items():
        figure = re.search(re.escape(words) + r"[^(]*\((\d+)%", limits)
        assert figure, words
        assert int(figure.group(1)) == round(100 * figures[name]), (words, figures[name])

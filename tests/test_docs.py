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

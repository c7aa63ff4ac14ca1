"""The $ASSAY_* settings every command reads: parsed in one place, and a bad value stops the
command at once with the variable named (exit 2), before any row is judged."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from assay.cli import app
from assay.environment import cache_megabytes, thread_count
from assay.schema import RequestValidationError

runner = CliRunner()


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("ASSAY_THREADS", "abc", "error: $ASSAY_THREADS: must be a whole number >= 1, got 'abc'"),
        ("ASSAY_THREADS", "-2", "error: $ASSAY_THREADS: must be a whole number >= 1, got '-2'"),
        ("ASSAY_JUDGE", "gpt", "error: $ASSAY_JUDGE: unknown judge 'gpt'; known judges: "),
        ("ASSAY_EMBEDDING_CACHE_MB", "nan", "error: $ASSAY_EMBEDDING_CACHE_MB: must be a number"),
    ],
)
def test_a_bad_setting_stops_the_command_naming_the_variable(
    variable: str, value: str, message: str
) -> None:
    result = runner.invoke(app, ["detectors"], env={variable: value})

    assert result.exit_code == 2
    assert result.stderr.startswith(message), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_settings_read_their_defaults_and_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ASSAY_THREADS", raising=False)
    monkeypatch.setenv("ASSAY_EMBEDDING_CACHE_MB", " 0.5 ")
    assert 1 <= thread_count() <= 4
    assert cache_megabytes() == 0.5
    monkeypatch.setenv("ASSAY_THREADS", "3")
    assert thread_count() == 3
    monkeypatch.setenv("ASSAY_EMBEDDING_CACHE_MB", "inf")
    with pytest.raises(RequestValidationError, match="ASSAY_EMBEDDING_CACHE_MB"):
        cache_megabytes()

"""Run the `assay` command as a real subprocess, as the OOD CLI tests do."""

from __future__ import annotations

import os
import subprocess
import sys


def offline_env() -> dict[str, str]:
    """The environment without its ASSAY_LLM_* settings: the offline path."""
    return {k: v for k, v in os.environ.items() if not k.startswith("ASSAY_LLM_")}


def assay(*args: str) -> subprocess.CompletedProcess[str]:
    """`python -m assay.cli ARGS` with the ASSAY_LLM_* settings removed (the offline path) and a
    wide terminal, so tables do not wrap the texts the tests look for."""
    env = offline_env()
    return subprocess.run(
        [sys.executable, "-m", "assay.cli", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**env, "COLUMNS": "200"},
    )

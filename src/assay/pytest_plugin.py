"""pytest plugin: judge LLM outputs inside ordinary tests.

Installed with Assay (entry point `pytest11`), it gives every test suite:

- the `assay` fixture: an `AssayClient` (a `Client`) that runs in-process on the default judge,
  or talks to an Assay server when `$ASSAY_BASE_URL` (or `$CLIENT_BASE_URL`) is set;
- `assert_detect(...)`, the fixture's method (also `from assay.pytest_plugin import
  assert_detect`): score one response and fail the test when a detector's score is below its
  threshold, with the instruction breakdown (which instruction failed, its follow_probability and
  the judge's explanation) in the message.

The plugin loads in every pytest run of an environment that has Assay, so it imports nothing of
Assay's until a test asks for the fixture or `assert_detect` (`assay.assertions` holds them).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from assay.assertions import DEFAULT_MIN_SCORE, AssayClient, assert_detect

__all__ = ["DEFAULT_MIN_SCORE", "AssayClient", "assay", "assert_detect"]


def __getattr__(name: str) -> Any:
    if name in ("DEFAULT_MIN_SCORE", "AssayClient", "assert_detect"):
        return getattr(importlib.import_module("assay.assertions"), name)
    raise AttributeError(f"module 'assay.pytest_plugin' has no attribute {name!r}")


@pytest.fixture
def assay() -> Iterator[AssayClient]:
    """An Assay client for the test: in-process on the default judge (`$ASSAY_JUDGE`, else the
    embedded one), or remote when `$ASSAY_BASE_URL` / `$CLIENT_BASE_URL` names a server."""
    from assay.assertions import AssayClient

    client = AssayClient()
    try:
        yield client
    finally:
        client.close()

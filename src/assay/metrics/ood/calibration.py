"""The fitted parameters of the offline OOD judge (`calibration.json`, written by `bench/ood.py`).

Two logistic models over named features: `scope` (query vs profile, `scope.py`) and `refusal`
(reply, `refusal.py`). Each of those modules asks for its model by name with the feature list it
computes, so a calibration fitted on other features is refused at load.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

from assay.judges.embedded.calibration import Logistic

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

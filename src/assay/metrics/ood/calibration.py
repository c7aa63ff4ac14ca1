"""The fitted parameters of the offline OOD judge (`calibration.json`, written by `bench/ood.py`).

Two logistic models over named features: `scope` (query vs profile) and `refusal` (reply).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from assay.judges.embedded.calibration import Logistic

CALIBRATION_FILE = "calibration.json"


@dataclass(frozen=True)
class OODCalibration:
    """scope: P(in scope) from scope features; refusal: P(refused) from reply features."""

    scope: Logistic
    refusal: Logistic


def _logistic(spec: dict[str, Any], expected: tuple[str, ...], name: str) -> Logistic:
    features, mean, scale, weights = (
        tuple(spec[key]) for key in ("features", "mean", "scale", "weights")
    )
    model = Logistic(features, mean, scale, weights, float(spec["bias"]))
    if model.features != expected:
        raise ValueError(f"OOD {name} calibration was fitted on other features; rerun bench/ood.py")
    return model


def parse_calibration(data: dict[str, Any]) -> OODCalibration:
    """Build the calibration from its JSON form, checking it matches the current features."""
    from assay.metrics.ood.refusal import REFUSAL_FEATURES
    from assay.metrics.ood.scope import SCOPE_FEATURES

    return OODCalibration(
        scope=_logistic(data["scope"], SCOPE_FEATURES, "scope"),
        refusal=_logistic(data["refusal"], REFUSAL_FEATURES, "refusal"),
    )


@cache
def load_calibration() -> OODCalibration:
    """The bundled calibration (read once per process)."""
    text = resources.files("assay.metrics.ood").joinpath(CALIBRATION_FILE).read_text("utf-8")
    return parse_calibration(json.loads(text))

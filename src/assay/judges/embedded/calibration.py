"""Calibrated mapping from an instruction's evidence features to P(followed).

Each instruction has a logistic model over its standardised features, fitted on the dev data by
`bench/calibrate.py`. Only the fitted coefficients ship (in `calibration.json`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from assay.judges.embedded.signals import CHECK_FEATURES, feature_names

CALIBRATION_FILE = "calibration.json"


@dataclass(frozen=True)
class Logistic:
    features: tuple[str, ...]
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    weights: tuple[float, ...]
    bias: float

    def probability(self, values: dict[str, float]) -> float:
        z = self.bias + sum(
            w * (values[name] - m) / s
            for name, m, s, w in zip(
                self.features, self.mean, self.scale, self.weights, strict=True
            )
        )
        return 1.0 / (1.0 + math.exp(-max(min(z, 40.0), -40.0)))


@dataclass(frozen=True)
class Calibration:
    encoder: str
    checks: dict[str, Logistic]


def parse(data: dict[str, Any]) -> Calibration:
    checks = {}
    for check, spec in data["checks"].items():
        model = Logistic(
            features=tuple(spec["features"]),
            mean=tuple(spec["mean"]),
            scale=tuple(spec["scale"]),
            weights=tuple(spec["weights"]),
            bias=float(spec["bias"]),
        )
        if model.features != feature_names(check):
            raise ValueError(f"calibration for {check!r} was fitted on other features; refit it")
        checks[check] = model
    missing = set(CHECK_FEATURES) - set(checks)
    if missing:
        raise ValueError(f"calibration lacks checks: {', '.join(sorted(missing))}")
    return Calibration(encoder=str(data["encoder"]), checks=checks)


@cache
def load_calibration() -> Calibration:
    text = resources.files("assay.judges.embedded").joinpath(CALIBRATION_FILE).read_text("utf-8")
    return parse(json.loads(text))

"""Calibrated mapping from an instruction's evidence features to P(followed).

Each instruction has a logistic model over its standardised features, fitted on the dev data by
`bench/calibrate.py`. Only the fitted coefficients ship (in `calibration.json`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import numpy as np
import numpy.typing as npt

from assay.judges.embedded.signals import CHECK_FEATURES, feature_names

CALIBRATION_FILE = "calibration.json"


def recalibrate(
    z: npt.NDArray[np.float64], knots_z: Sequence[float], knots_p: Sequence[float]
) -> npt.NDArray[np.float64]:
    """P(followed) from the logistic's logit through a monotone curve: linear between knots
    (strictly increasing), and beyond the end knots the logit moves one to one with z, so no
    two different logits ever share a probability."""
    zs, ps = np.asarray(knots_z, float), np.asarray(knots_p, float)
    inside = np.interp(z, zs, ps)
    low = _sigmoid(_logit(ps[0]) + (z - zs[0]))
    high = _sigmoid(_logit(ps[-1]) + (z - zs[-1]))
    out: npt.NDArray[np.float64] = np.where(z < zs[0], low, np.where(z > zs[-1], high, inside))
    return out


def _sigmoid(z: npt.NDArray[np.float64] | float) -> npt.NDArray[np.float64]:
    return np.asarray(1.0 / (1.0 + np.exp(-np.clip(z, -40.0, 40.0))), float)


def _logit(p: float) -> float:
    p = min(max(p, 1e-6), 1 - 1e-6)
    return math.log(p / (1 - p))


@dataclass(frozen=True)
class Logistic:
    """A logistic model over standardised features, optionally followed by a monotone curve
    (fitted where a straight logistic is over- or under-confident in places)."""

    features: tuple[str, ...]
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    weights: tuple[float, ...]
    bias: float
    curve_z: tuple[float, ...] = ()
    curve_p: tuple[float, ...] = ()

    def pull(self, values: dict[str, float]) -> dict[str, float]:
        """Each feature's term of the logit (negative: it pushed towards "not followed")."""
        return {
            name: w * (values[name] - m) / s
            for name, m, s, w in zip(
                self.features, self.mean, self.scale, self.weights, strict=True
            )
        }

    def logit(self, values: dict[str, float]) -> float:
        return self.bias + sum(self.pull(values).values())

    def probability(self, values: dict[str, float]) -> float:
        z = np.array([self.logit(values)])
        if self.curve_z:
            return float(recalibrate(z, self.curve_z, self.curve_p)[0])
        return float(_sigmoid(z)[0])


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
            curve_z=tuple(spec.get("curve_z", ())),
            curve_p=tuple(spec.get("curve_p", ())),
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

"""The detector registry. A new detector is one new module plus one line in `_ALL`."""

from __future__ import annotations

from assay.detectors import completeness, output_relevance
from assay.detectors.base import Detector, Instruction

__all__ = ["Detector", "Instruction", "DETECTORS", "get_detector"]

_ALL = (output_relevance.DETECTOR, completeness.DETECTOR)

DETECTORS: dict[str, Detector] = {detector.name: detector for detector in _ALL}


def get_detector(name: str) -> Detector:
    """The detector called `name`; KeyError listing the known names otherwise."""
    try:
        return DETECTORS[name]
    except KeyError:
        raise KeyError(
            f"unknown detector {name!r}; known detectors: {', '.join(DETECTORS)}"
        ) from None

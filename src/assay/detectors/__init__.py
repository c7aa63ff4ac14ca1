"""The detector registry. A new detector is one new module plus one line in `_ALL`."""

from __future__ import annotations

from assay.detectors import completeness, output_relevance
from assay.detectors.base import Detector, Instruction

__all__ = ["Detector", "Instruction", "DETECTORS", "detectors_for_inputs", "get_detector"]

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


def detectors_for_inputs(user_query: object, context: object) -> list[str]:
    """Every detector whose required inputs are given (a response is always given): what
    `assay run`, `assay.detect` and `assert_detect` run when no detector is named."""
    given = {"generated_text"}
    if user_query is not None:
        given.add("user_query")
    if context is not None:
        given.add("context")
    return [d.name for d in DETECTORS.values() if set(d.required_inputs) <= given]

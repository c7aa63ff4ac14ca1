"""What a detector is: a fixed rubric of instructions, the inputs it needs, and how it scores."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Instruction:
    """One rubric line. `check` is a stable id; `text` is the published wording, byte-exact."""

    check: str
    text: str


@dataclass(frozen=True)
class Detector:
    """A quality detector.

    name: the key used in request `config` and in results.
    description: one line for listings.
    instructions: the rubric, in published order.
    required_inputs: request fields that must be present and non-blank.
    optional_inputs: request fields used when present.
    """

    name: str
    description: str
    instructions: tuple[Instruction, ...]
    required_inputs: tuple[str, ...]
    optional_inputs: tuple[str, ...] = ()

    def score(self, labels: list[bool]) -> float:
        """Quality detectors score the fraction of instructions followed."""
        return sum(labels) / len(labels) if labels else 0.0

"""The bundled probe bank: everyday off-topic questions by topic (`probes/bank.yaml`)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources

import yaml


@dataclass(frozen=True)
class Probe:
    """One bank question.

    topic: the bank topic it belongs to (the generator never picks two from one topic).
    text: the question as a user would type it.
    """

    topic: str
    text: str


@cache
def probe_bank() -> tuple[Probe, ...]:
    """Every probe in the bank, in file order (read once per process)."""
    text = resources.files("assay.metrics.ood").joinpath("probes", "bank.yaml").read_text("utf-8")
    topics: dict[str, list[str]] = yaml.safe_load(text)["topics"]
    return tuple(Probe(topic, query) for topic, queries in topics.items() for query in queries)

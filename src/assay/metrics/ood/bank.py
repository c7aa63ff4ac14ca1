"""The bundled probe bank: everyday off-topic questions by topic (`probes/bank.yaml`)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import yaml

from assay.judges.embedded.encoder import Matrix
from assay.metrics.ood.embedding import CachedEncoder, shared_encoder
from assay.metrics.ood.vectors import probes_dir, shipped_vectors

BANK_FILE = "bank.yaml"


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
    text = probes_dir().joinpath(BANK_FILE).read_text("utf-8")
    topics: dict[str, list[str]] = yaml.safe_load(text)["topics"]
    return tuple(Probe(topic, query) for topic, queries in topics.items() for query in queries)


@cache
def _shipped_vectors() -> Matrix | None:
    return shipped_vectors(BANK_FILE, len(probe_bank()))


def bank_vectors(encoder: CachedEncoder | None = None) -> Matrix:
    """Embeddings of every bank probe, in bank order.

    encoder: the encoder in use; with the shared MiniLM (the default) the precomputed vectors
        shipped next to the bank are used when they match the bank file, so a process does not
        spend seconds embedding the bank on its first call.
    """
    shared = shared_encoder()
    if encoder is None or encoder is shared:
        shipped = _shipped_vectors()
        if shipped is not None:
            return shipped
    return (encoder or shared).encode([probe.text for probe in probe_bank()])

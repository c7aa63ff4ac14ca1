"""The bundled probe bank: everyday off-topic questions by topic (`probes/bank.yaml`)."""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from functools import cache
from importlib import resources

import numpy as np
import yaml

from assay.judges.embedded.encoder import Matrix
from assay.metrics.ood.embedding import CachedEncoder, shared_encoder

logger = logging.getLogger(__name__)

#: Precomputed MiniLM embeddings of the bank (float16) and what they were computed from.
VECTORS_FILE = "bank_minilm.npy"
VECTORS_META = "bank_minilm.json"


@dataclass(frozen=True)
class Probe:
    """One bank question.

    topic: the bank topic it belongs to (the generator never picks two from one topic).
    text: the question as a user would type it.
    """

    topic: str
    text: str


def _probes_dir() -> resources.abc.Traversable:
    return resources.files("assay.metrics.ood").joinpath("probes")


def bank_digest() -> str:
    """sha256 of the bank file, to tell whether precomputed embeddings are current."""
    return hashlib.sha256(_probes_dir().joinpath("bank.yaml").read_bytes()).hexdigest()


@cache
def probe_bank() -> tuple[Probe, ...]:
    """Every probe in the bank, in file order (read once per process)."""
    text = _probes_dir().joinpath("bank.yaml").read_text("utf-8")
    topics: dict[str, list[str]] = yaml.safe_load(text)["topics"]
    return tuple(Probe(topic, query) for topic, queries in topics.items() for query in queries)


@cache
def _shipped_vectors() -> Matrix | None:
    folder = _probes_dir()
    try:
        meta = json.loads(folder.joinpath(VECTORS_META).read_text("utf-8"))
        with folder.joinpath(VECTORS_FILE).open("rb") as handle:
            vectors = np.load(handle).astype(np.float32)
    except (OSError, ValueError) as error:
        logger.info("no usable precomputed bank embeddings (%s); embedding the bank", error)
        return None
    if meta.get("bank_sha256") != bank_digest() or vectors.shape[0] != len(probe_bank()):
        logger.info("precomputed bank embeddings are stale; embedding the bank")
        return None
    result: Matrix = vectors
    return result


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

"""The bundled capability bank: typical requests to service assistants, by domain and capability
(`probes/capabilities.yaml`).

The scope judge matches a profile's topics and examples against the capability names and
requests: matched ("listed") capabilities widen the profile with their requests; unlisted ones of
the same domains are the contrast for requests the application does not support; the rest is
contrast for other fields. The generator draws near-domain probes from the unlisted ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache, cached_property

import numpy as np
import numpy.typing as npt
import yaml

from assay.judges.embedded.embedding_cache import CachedEncoder, shared_encoder
from assay.judges.embedded.encoder import Matrix
from assay.metrics.ood.vectors import probes_dir, shipped_vectors

CAPABILITY_FILE = "capabilities.yaml"


@dataclass(frozen=True)
class Capability:
    """One capability of one domain.

    domain: the domain's key ("banking").
    domain_name: what the domain is, in words ("retail banking and current accounts").
    name: the capability ("order checks"), sometimes with synonyms in brackets.
    requests: how users ask for it.
    """

    domain: str
    domain_name: str
    name: str
    requests: tuple[str, ...]


@dataclass(frozen=True)
class CapabilityTable:
    """The bank with its embeddings.

    capabilities: every capability, in file order.
    name_vectors: one row per capability (its name).
    request_vectors: one row per request, capability by capability.
    request_owner: for each request row, the index of its capability.
    """

    capabilities: tuple[Capability, ...]
    name_vectors: Matrix
    request_vectors: Matrix
    request_owner: npt.NDArray[np.int64]

    @cached_property
    def field_centroids(self) -> dict[str, Matrix]:
        """Each field (domain) -> the normalised mean of its requests' vectors."""
        rows: dict[str, list[Matrix]] = {}
        for owner, vector in zip(self.request_owner, self.request_vectors, strict=True):
            rows.setdefault(self.capabilities[owner].domain, []).append(vector)
        means = {field: np.mean(vectors, axis=0) for field, vectors in rows.items()}
        return {field: mean / np.linalg.norm(mean) for field, mean in means.items()}

    def texts_of(self, index: int) -> list[str]:
        """The name and requests of capability `index`."""
        capability = self.capabilities[index]
        return [capability.name, *capability.requests]

    @cached_property
    def vector_of(self) -> dict[str, Matrix]:
        """Each bank text (a capability's name or request) -> its row of the table, so that a
        profile's index reuses the table's vectors instead of encoding the bank again."""
        requests = [r for c in self.capabilities for r in c.requests]
        found = dict(zip(requests, self.request_vectors, strict=True))
        for capability, vector in zip(self.capabilities, self.name_vectors, strict=True):
            found.setdefault(capability.name, vector)
        return found

    def vectors(self, texts: Sequence[str], encoder: CachedEncoder) -> Matrix:
        """Embeddings of `texts`: a bank text's row of the table, any other text encoded."""
        if not texts:
            return np.zeros((0, 384), dtype=np.float32)
        known = self.vector_of
        missing = list(dict.fromkeys(t for t in texts if t not in known))
        fresh = dict(zip(missing, encoder.encode(missing), strict=True)) if missing else {}
        return np.stack([known[t] if t in known else fresh[t] for t in texts])


@cache
def capability_bank() -> tuple[Capability, ...]:
    """Every capability in the bank, in file order (read once per process)."""
    text = probes_dir().joinpath(CAPABILITY_FILE).read_text("utf-8")
    domains: dict[str, dict[str, object]] = yaml.safe_load(text)["domains"]
    found: list[Capability] = []
    for key, spec in domains.items():
        capabilities = spec["capabilities"]
        assert isinstance(capabilities, dict)
        for name, requests in capabilities.items():
            found.append(Capability(key, str(spec["name"]), name, tuple(requests)))
    return tuple(found)


def bank_texts() -> list[str]:
    """Every text to embed, in the order of the shipped vectors: names, then requests."""
    bank = capability_bank()
    return [c.name for c in bank] + [r for c in bank for r in c.requests]


def _table(vectors: Matrix) -> CapabilityTable:
    bank = capability_bank()
    owners = np.array([i for i, c in enumerate(bank) for _ in c.requests], dtype=np.int64)
    return CapabilityTable(bank, vectors[: len(bank)], vectors[len(bank) :], owners)


@cache
def _shipped_table() -> CapabilityTable:
    texts = bank_texts()
    vectors = shipped_vectors(CAPABILITY_FILE, len(texts))
    return _table(vectors if vectors is not None else shared_encoder().encode(texts))


def capability_table(encoder: CachedEncoder | None = None) -> CapabilityTable:
    """The bank with embeddings from `encoder` (the shipped MiniLM vectors by default)."""
    if encoder is None or encoder is shared_encoder():
        return _shipped_table()
    return _table(encoder.encode(bank_texts()))

"""Precomputed MiniLM embeddings shipped next to the probe and capability banks.

Embedding a bank costs seconds on a small CPU, so `bench/ood.py` writes each bank's vectors
(float16) with a small JSON file recording the bank file's sha256. At run time the vectors are
used only when that digest matches the bank file and the row count matches; otherwise the bank
is embedded afresh (and a log line says why).
"""

from __future__ import annotations

import hashlib
import json
import logging
from importlib import resources

import numpy as np

from assay.judges.embedded.encoder import Matrix

logger = logging.getLogger(__name__)

MODEL = "all-MiniLM-L6-v2-int8"


def probes_dir() -> resources.abc.Traversable:
    """The package folder holding the banks and their vectors."""
    return resources.files("assay.metrics.ood").joinpath("probes")


def file_digest(name: str) -> str:
    """sha256 of a bank file in `probes_dir()`."""
    return hashlib.sha256(probes_dir().joinpath(name).read_bytes()).hexdigest()


def vector_files(source: str) -> tuple[str, str]:
    """The vectors file and its metadata file for bank file `source` ("bank.yaml" ->
    "bank_minilm.npy", "bank_minilm.json")."""
    stem = source.rsplit(".", 1)[0]
    return f"{stem}_minilm.npy", f"{stem}_minilm.json"


def shipped_vectors(source: str, rows: int) -> Matrix | None:
    """The shipped vectors of bank file `source` when they match it, else None.

    source: the bank file name in `probes_dir()`.
    rows: how many texts the bank has now (a mismatch means the vectors are stale).
    """
    vectors_name, meta_name = vector_files(source)
    folder = probes_dir()
    try:
        meta = json.loads(folder.joinpath(meta_name).read_text("utf-8"))
        with folder.joinpath(vectors_name).open("rb") as handle:
            vectors = np.load(handle).astype(np.float32)
    except (OSError, ValueError) as error:
        logger.info("no usable precomputed vectors for %s (%s); embedding it", source, error)
        return None
    if meta.get("sha256") != file_digest(source) or vectors.shape[0] != rows:
        logger.info("precomputed vectors for %s are stale; embedding it", source)
        return None
    result: Matrix = vectors
    return result


def vectors_meta(source: str) -> dict[str, str]:
    """What `bench/ood.py` writes next to the vectors of `source`."""
    return {"sha256": file_digest(source), "model": MODEL, "dtype": "float16"}

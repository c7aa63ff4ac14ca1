"""How the encoder cuts a call's texts into batches that run side by side."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from assay.judges.embedded.encoder import balanced_batches


@dataclass
class Encoded:
    """What `balanced_batches` reads of a tokenizer's encoding."""

    ids: list[int]
    type_ids: list[int]


def encodings(lengths: list[int]) -> list[Encoded]:
    return [Encoded([1] * n, [0] * n) for n in lengths]


def cost(batch: tuple[Any, dict[str, Any]]) -> int:
    """Rows × padded width: what a batch costs the model."""
    return int(batch[1]["input_ids"].size)


# The sentence lengths of one real answer: its eleven sentences fit in one round of two threads.
ANSWER = [18, 19, 28, 30, 30, 32, 34, 35, 35, 39, 43]


def test_one_round_of_texts_makes_one_batch_per_thread() -> None:
    batches = balanced_batches(encodings(ANSWER), threads=2, most=8)
    # Cut by unpadded length, the same texts made three batches: one thread ran two of them.
    assert len(batches) == 2
    # Neither batch costs more than 60% of the padded whole (an even cut is 50%).
    assert max(cost(b) for b in batches) <= 0.6 * sum(cost(b) for b in batches)


@pytest.mark.parametrize(
    ("lengths", "threads", "most"),
    [(ANSWER, 2, 8), ([5] * 40, 2, 8), (list(range(1, 70)), 4, 8), ([7], 2, 8), ([3, 250], 2, 8)],
)
def test_every_text_lands_in_one_batch_of_at_most_most_rows(
    lengths: list[int], threads: int, most: int
) -> None:
    batches = balanced_batches(encodings(lengths), threads, most)
    rows = sorted(int(i) for batch_rows, _ in batches for i in batch_rows)
    assert rows == list(range(len(lengths)))
    assert all(len(batch_rows) <= most for batch_rows, _ in batches)
    # Whole rounds: never more batches than threads × the rounds the texts need.
    assert len(batches) <= threads * -(-len(lengths) // (threads * most))
    # Padded to the batch's longest text, and its mask marks each text's own length.
    for batch_rows, inputs in batches:
        width = max(lengths[i] for i in batch_rows)
        assert inputs["input_ids"].shape == (len(batch_rows), width)
        assert inputs["attention_mask"].sum(axis=1).tolist() == [lengths[i] for i in batch_rows]

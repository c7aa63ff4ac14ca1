"""How the encoder cuts a call's texts into batches that run side by side."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from assay.judges.embedded.encoder import balanced_batches


@dataclass
class Encoded:
    """What `balanced_batches` reads of a tokenizer's encoding."""

    ids: list[int]
    type_ids: list[int]


def encodings(lengths: list[int]) -> list[Encoded]:
    return [Encoded([1] * n, [0] * n) for n in lengths]


# The sentence lengths of one real answer.
ANSWER = [18, 19, 28, 30, 30, 32, 34, 35, 35, 39, 43]


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
    # Longest first, so that shorter batches fill in around it.
    widths = [inputs["input_ids"].shape[1] for _, inputs in batches]
    assert widths == sorted(widths, reverse=True)
    # Padded to the batch's longest text, and its mask marks each text's own length.
    for batch_rows, inputs in batches:
        width = max(lengths[i] for i in batch_rows)
        assert inputs["input_ids"].shape == (len(batch_rows), width)
        assert inputs["attention_mask"].sum(axis=1).tolist() == [lengths[i] for i in batch_rows]

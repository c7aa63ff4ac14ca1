"""Shared helpers for the benchmarks: locate ../shared/data, load rows, compute features.

The data is never copied into this repository. Set ASSAY_DATA_DIR (or pass --data) to point
elsewhere; benchmarks skip cleanly when the folder is absent.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import itertools
import json
import os
import sys
import time
from collections.abc import Iterable, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import httpx
import numpy as np

import encoders
from assay.detectors import DETECTORS
from assay.judges.base import Question
from assay.judges.embedded import agreement_model
from assay.judges.embedded import encoder as encoder_module
from assay.judges.embedded.agreement_model import MODEL_FILE, RESIDUALS_FILE, AgreementModel
from assay.judges.embedded.encoder import Encoder, Kind
from assay.judges.embedded.judge import gather

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "bench" / ".cache"
RESULTS = ROOT / "bench" / "RESULTS.md"


def data_dir() -> Path:
    return Path(os.environ.get("ASSAY_DATA_DIR", ROOT.parent / "shared" / "data"))


def require_data() -> Path:
    directory = data_dir()
    if not (directory / "haluquestqa").is_dir():
        print(f"skipped: dev data not found at {directory} (set ASSAY_DATA_DIR)")
        sys.exit(0)
    return directory


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def relevance_rows() -> list[dict[str, Any]]:
    """haluquestqa relevance: positive = no expert-flagged irrelevant span."""
    rows = read_jsonl(require_data() / "haluquestqa" / "relevance.jsonl")
    return [
        {
            "query": r["query"],
            "response": r["response"],
            "context": (),
            "positive": not r["meta"]["derived_has_irrelevant_span"],
            "label": r["label"],
        }
        for r in rows
    ]


def answer_authors() -> dict[str, bool]:
    """haluquestqa answer id -> whether GPT-4 wrote it (else a Reddit user)."""
    rows = read_jsonl(require_data() / "haluquestqa" / "relevance.jsonl")
    return {r["id"]: "gpt" in r["meta"]["answer_author"].lower() for r in rows}


def completeness_rows() -> list[dict[str, Any]]:
    """haluquestqa completeness (no documents exist: the question stands in as context)."""
    rows = read_jsonl(require_data() / "haluquestqa" / "completeness.jsonl")
    return [
        {
            "query": r["query"],
            "response": r["response"],
            "context": (r["query"],),
            "positive": not r["meta"]["derived_has_incomplete_span"],
            "label": r["label"],
        }
        for r in rows
    ]


def pairwise_rows() -> list[dict[str, Any]]:
    """ragchecker pairs with the reference answer as context; label > 0: response_b more complete.

    Pairs where either response is blank are left out: the detectors reject an empty
    `generated_text` as bad input rather than scoring it.
    """
    rows = read_jsonl(require_data() / "ragchecker_meta_eval" / "human_pairwise.jsonl")
    rows = [r for r in rows if r["response"].strip() and r["response_b"].strip()]
    return [
        {
            "query": r["query"],
            "a": r["response"],
            "b": r["response_b"],
            "context": (r["context"],),
            "label": r["label"],
        }
        for r in rows
    ]


def questions(
    detector: str, query: str | None, response: str, context: Sequence[str]
) -> list[Question]:
    return [
        Question(
            detector=detector,
            check=instruction.check,
            instruction=instruction.text,
            generated_text=response,
            user_query=query,
            context=tuple(context),
        )
        for instruction in DETECTORS[detector].instructions
    ]


def cache_key(*modules: Any) -> str:
    """A short hash of the modules' source and of the CPU's kernels (`KERNEL_FLAGS`): a disk
    cache named by it is never read by code, or on a CPU, that would compute its entries
    differently. A cache that outlived such a change twice kept the committed figures from
    being reproduced in a fresh clone (DEVELOPERS.md, "Supervision, and how figures stay
    honest")."""
    source = b"".join(Path(m.__file__).read_bytes() for m in modules)
    kernels = ",".join(f for f in KERNEL_FLAGS if f in _cpu()[1])
    return hashlib.sha256(source + kernels.encode()).hexdigest()[:12]


class CachedEncoder:
    """An encoder whose vectors are kept on disk, so that editing a feature recomputes features
    in seconds instead of re-encoding every text."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.inner: Encoder | None = None
        self.model_id = name
        self.path = CACHE / f"vectors-{name}-{cache_key(encoder_module, encoders)}.npz"
        self.index: dict[str, int] = {}
        self.vectors = np.zeros((0, 384), np.float32)
        if self.path.exists():
            saved = np.load(self.path, allow_pickle=False)
            self.vectors = saved["vectors"]
            self.index = {t: i for i, t in enumerate(saved["texts"].tolist())}
        self.dirty = False

    def encode(self, texts: Sequence[str], kind: Kind = "passage") -> np.ndarray:
        missing = list(dict.fromkeys(t for t in texts if t not in self.index))
        if missing:
            if self.inner is None:
                self.inner = encoders.bench_encoder(self.name)
            fresh = self.inner.encode(missing, kind)
            base = len(self.vectors)
            self.vectors = np.concatenate([self.vectors, fresh.astype(np.float32)])
            self.index.update({t: base + i for i, t in enumerate(missing)})
            self.dirty = True
        return self.vectors[[self.index[t] for t in texts]]

    def save(self) -> None:
        if self.dirty:
            CACHE.mkdir(parents=True, exist_ok=True)
            texts = np.array(sorted(self.index, key=self.index.__getitem__), dtype=str)
            np.savez(self.path, vectors=self.vectors, texts=texts)
            self.dirty = False


class CachedAgreement:
    """An agreement model whose answers are kept on disk, keyed by the model files and the code
    that runs them."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.store: Path | None = None
        self.answers: dict[str, list[float]] = {}
        self.model: AgreementModel | None = None
        self.dirty = False

    def _open(self) -> None:
        # Read lazily: output_relevance never asks, and needs no model file.
        if self.store is None:
            # A packed model is its graph and its residuals: both make its answers.
            files = [self.path, self.path.with_name(RESIDUALS_FILE)]
            data = b"".join(f.read_bytes() for f in files if f.is_file())
            data += cache_key(agreement_model, encoder_module).encode()
            digest = hashlib.sha256(data).hexdigest()[:16]
            self.store = CACHE / f"agreement-{digest}.json"
            if self.store.exists():
                self.answers = json.loads(self.store.read_text())

    def predict(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        self._open()
        keys = [json.dumps(p) for p in pairs]
        missing = [p for p, k in zip(pairs, keys, strict=True) if k not in self.answers]
        if missing:
            if self.model is None:
                # Unpinned: the cross-fitted models are not the shipped one.
                self.model = AgreementModel(self.path, sha256=None, weights_sha256=None)
            fresh = self.model.predict(list(dict.fromkeys(missing)))
            for p, row in zip(dict.fromkeys(missing), fresh, strict=True):
                self.answers[json.dumps(p)] = [round(float(x), 5) for x in row]
            self.dirty = True
        return np.array([self.answers[k] for k in keys], dtype=np.float32).reshape(-1, 3)

    def save(self) -> None:
        if self.dirty and self.store is not None:
            self.store.write_text(json.dumps(self.answers))
            self.dirty = False


_ENCODERS: dict[str, CachedEncoder] = {}
_AGREEMENT: dict[Path, CachedAgreement] = {}


def cached_agreement(path: Path) -> CachedAgreement:
    if path not in _AGREEMENT:
        _AGREEMENT[path] = CachedAgreement(path)
    return _AGREEMENT[path]


def shipped_agreement_path() -> Path:
    return ROOT / "src" / "assay" / "judges" / "embedded" / MODEL_FILE


def cached_encoder(name: str) -> CachedEncoder:
    if name not in _ENCODERS:
        _ENCODERS[name] = CachedEncoder(name)
    return _ENCODERS[name]


def features(
    encoder_name: str,
    detector: str,
    items: Iterable[tuple[str | None, str, Sequence[str]]],
    agreement: Path | None = None,
) -> list[dict[str, float]]:
    """Evidence features for each (query, response, context), from disk-cached embeddings and
    agreement answers. agreement: the agreement model file (default: the shipped one)."""
    items = list(items)
    encoder = cached_encoder(encoder_name)
    model = cached_agreement(agreement or shipped_agreement_path())
    out: list[dict[str, float]] = []
    for start in range(0, len(items), 256):
        batch = items[start : start + 256]
        qs = [
            q for query, response, ctx in batch for q in questions(detector, query, response, ctx)
        ]
        evidence = gather(encoder, qs, model)  # type: ignore[arg-type]
        for query, response, ctx in batch:
            out.append(dict(evidence[(response, query, tuple(ctx))].features))
        print(
            f"  {detector}/{encoder_name}: {len(out)}/{len(items)} rows", file=sys.stderr, end="\r"
        )
        if start % 4096 == 0:
            encoder.save()
            model.save()
    print(file=sys.stderr)
    encoder.save()
    model.save()
    return out


def matrix(rows: list[dict[str, float]], names: Sequence[str]) -> np.ndarray:
    return np.array([[row[name] for name in names] for row in rows], dtype=np.float64)


def expected_calibration_error(
    probabilities: np.ndarray, outcomes: np.ndarray, bins: int = 10
) -> float:
    """ECE with equal-width bins: the weighted gap between confidence and observed frequency."""
    edges = np.linspace(0.0, 1.0, bins + 1)
    which = np.clip(np.digitize(probabilities, edges[1:-1]), 0, bins - 1)
    total = 0.0
    for b in range(bins):
        mask = which == b
        if mask.any():
            total += mask.mean() * abs(probabilities[mask].mean() - outcomes[mask].mean())
    return float(total)


async def post_detect(
    url: str,
    api_key: str,
    payloads: list[list[dict[str, Any]]],
    clients: int,
    total: int | None = None,
) -> dict[str, float]:
    """POST `total` bodies (default: each of `payloads` once) to /v2/detect, in order, cycling
    through `payloads`, from `clients` concurrent senders: requests/s, latencies in ms, errors."""
    cycle = itertools.cycle(payloads)
    remaining = len(payloads) if total is None else total
    latencies: list[float] = []
    errors = 0

    async def sender(http: httpx.AsyncClient) -> None:
        nonlocal remaining, errors
        while remaining > 0:
            remaining -= 1
            body = next(cycle)
            started = time.perf_counter()
            response = await http.post("/v2/detect", json=body)
            latencies.append((time.perf_counter() - started) * 1000)
            if response.status_code != 200:
                errors += 1

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    headers = {"Authorization": f"Bearer {api_key}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, limits=limits, timeout=300) as http:
        started = time.perf_counter()
        await asyncio.gather(*(sender(http) for _ in range(clients)))
        elapsed = time.perf_counter() - started
    p50, p99 = np.percentile(latencies, [50, 99])
    return {
        "requests": len(latencies),
        "rps": len(latencies) / elapsed,
        "p50": p50,
        "p99": p99,
        "errors": errors,
    }


@cache
def _cpu() -> tuple[str, frozenset[str]]:
    """The CPU's model name and flags (from /proc/cpuinfo, where there is one), read once."""
    model, flags = "unknown CPU", set()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and model == "unknown CPU":
                model = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = set(value.split())
    return model, frozenset(flags)


#: CPU features that choose onnxruntime's kernels. Both models compute in float, so two kinds of
#: CPU give answers about 1e-7 apart (the int8 agreement graph used until 2026-12-07 moved them by
#: up to 0.027; DEVELOPERS.md, "Retraining"); a cache still holds the bytes of one kind only.
KERNEL_FLAGS = ("fma", "avx2", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni", "amx_int8")


def machine() -> str:
    """Cores and CPU, for speed figures: the same code ran 2.5–3× faster on the AVX-512 VNNI hosts
    measured than on AVX2 ones, so a speed figure means little without them."""
    model, flags = _cpu()
    vector = (
        "AVX-512 VNNI" if "avx512_vnni" in flags else "AVX2, no VNNI" if "avx2" in flags else ""
    )
    return ", ".join(p for p in (f"{os.cpu_count()} cores", model, vector) if p)


def pairwise(good: np.ndarray, bad: np.ndarray) -> float:
    """Share of pairs where the good side is higher; ties count half (a constant scores 0.5)."""
    return float(((good > bad) + 0.5 * (good == bad)).mean())


def script_parser(doc: str) -> argparse.ArgumentParser:
    """A benchmark's command line: its docstring as help, and `--no-write` (print only)."""
    parser = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--no-write", action="store_true", help="print only")
    return parser


def write_section(title: str, body: str) -> None:
    """Replace (or add) the section `## title` in bench/RESULTS.md."""
    text = RESULTS.read_text() if RESULTS.exists() else "# Benchmark results\n"
    marker = f"## {title}\n"
    section = f"{marker}\n{body.strip()}\n\n"
    if marker in text:
        start = text.index(marker)
        end = text.find("\n## ", start + len(marker))
        text = text[:start] + section + (text[end + 1 :] if end != -1 else "")
    else:
        text = text.rstrip() + "\n\n" + section
    RESULTS.write_text(text.rstrip() + "\n")

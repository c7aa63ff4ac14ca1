"""What a detector run would cost the LLM endpoint, worked out before any call (`--dry-run`).

`plan_items` / `plan_rows` find the instructions each LLM-backed judge would be asked (for the
cascade, by running the offline embedded judge first) and hand them to the LLM judge's estimate.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from assay._sync import run_sync
from assay.detectors import DETECTORS
from assay.detectors.evaluate import questions_for
from assay.environment import default_judge_name
from assay.judges import Question, get_judge
from assay.judges.cascade import CascadeJudge
from assay.judges.openai.estimate import CostEstimate, estimate_cost
from assay.judges.openai.judge import OpenAIJudge
from assay.judges.openai.settings import LLMSettings
from assay.runner.io import read_rows
from assay.runner.rows import DetectorScorer
from assay.schema import DetectRequestItem

#: Judges that call an LLM (and so have something to estimate).
LLM_JUDGES = ("openai", "cascade")


def llm_judge_settings() -> LLMSettings:
    """The settings of the registered "openai" judge (what a run would call)."""
    llm = get_judge("openai")
    assert isinstance(llm, OpenAIJudge)
    return llm.settings


def plan_items(items: Iterable[DetectRequestItem], judge: str | None) -> tuple[CostEstimate, int]:
    """The LLM cost of scoring `items`: (estimate, rows that would call the LLM).

    judge: the run's default judge; a detector's own `config.judge` wins, as in a real run.
    For the cascade, the embedded judge runs (offline) to find the instructions it would send up.
    """
    fallback = judge or default_judge_name()
    by_backend: dict[str, list[Question]] = {name: [] for name in LLM_JUDGES}
    for item in items:
        for name, config in item.config.items():
            backend = config.judge or fallback
            if backend in by_backend:
                by_backend[backend].extend(questions_for(item, DETECTORS[name]))
    llm = get_judge("openai")
    assert isinstance(llm, OpenAIJudge)
    questions = list(by_backend["openai"])
    if by_backend["cascade"]:
        cascade = get_judge("cascade")
        assert isinstance(cascade, CascadeJudge)
        first = run_sync(cascade.first.answer(by_backend["cascade"]))
        questions += [
            q for q, a in zip(by_backend["cascade"], first, strict=True) if cascade.uncertain(a)
        ]
    rows = {(q.generated_text, q.user_query, q.context) for q in questions}
    return estimate_cost(llm.settings, questions, llm.cache), len(rows)


def plan_rows(path: Path, scorer: DetectorScorer) -> tuple[CostEstimate, int]:
    """`plan_items` over a dataset file's valid rows, prepared as `scorer` would (invalid rows
    would make no call)."""
    prepared = (scorer.prepare(row) for row in read_rows(path, scorer.column_map))
    return plan_items((p.item for p in prepared if p.item is not None), scorer.judge)

"""`llm.ood_detection`: does a system answer inside its use case and decline outside it?

Python API::

    from assay.metrics.ood import score_rows_sync, summarize, CallableSUT
    results = score_rows_sync(rows, {"use_case": {...}}, sut=CallableSUT(my_bot))
    print(summarize(results).mean_score)

`score_rows` (async) is the entry point runners call, `load_run_config` reads a run's config
file (metric keys plus a `sut:` block), and `summarize` builds the run summary.
Nothing heavy is imported or loaded until a function is called.
"""

from assay.metrics.ood.config import OODMetricConfig, parse_config
from assay.metrics.ood.judge import LABELS, EmbeddedOODJudge, Judgement, LLMOODJudge, OODJudge
from assay.metrics.ood.profile import UseCaseProfile, load_profile, profile_from_mapping
from assay.metrics.ood.run_config import build_sut, load_run_config, parse_run_config
from assay.metrics.ood.scorer import (
    CaseResult,
    RowResult,
    apply_scoring,
    score_rows,
    score_rows_sync,
)
from assay.metrics.ood.summary import OODSummary, summarize
from assay.metrics.ood.sut import (
    CallableSUT,
    HttpJsonSUT,
    OpenAIChatSUT,
    RecordedSUT,
    SystemUnderTest,
)

METRIC_NAME = "llm.ood_detection"

__all__ = [
    "LABELS",
    "METRIC_NAME",
    "CallableSUT",
    "CaseResult",
    "EmbeddedOODJudge",
    "HttpJsonSUT",
    "Judgement",
    "LLMOODJudge",
    "OODJudge",
    "OODMetricConfig",
    "OODSummary",
    "OpenAIChatSUT",
    "RecordedSUT",
    "RowResult",
    "SystemUnderTest",
    "UseCaseProfile",
    "apply_scoring",
    "build_sut",
    "load_run_config",
    "parse_run_config",
    "load_profile",
    "parse_config",
    "profile_from_mapping",
    "score_rows",
    "score_rows_sync",
    "summarize",
]

"""What judging cost, per row: LLM calls, tokens, cache hits, sampled votes, cascade escalations,
and how often the LLM's written answer disagreed with its own probability.

Judges report usage against the texts a question is about (`record_usage`); whoever wants the
numbers (the runner, for each batch) opens a ledger with `collect_usage` around the judge calls
and reads each row's share back by the same texts. Outside a ledger, recording does nothing, so
judges can always report.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields

from assay.judges.base import Question
from assay.schema import DetectRequestItem

#: The texts that identify a row to its judges: (generated_text, user_query, context).
RowKey = tuple[str, str | None, tuple[str, ...]]
#: The key for calls made for a whole row rather than for some of its texts (a metric's calls,
#: which open a ledger per row).
WHOLE_ROW: RowKey = ("", None, ())


@dataclass
class Usage:
    """Counts for one row or a whole run.

    calls: HTTP calls made to the LLM endpoint for rows (retries and re-asks included).
    probe_calls: calls of the endpoint's one capability probe (counted on the row whose call
        needed it; once per endpoint per process).
    prompt_tokens / completion_tokens: tokens all those calls used, as the endpoint reported.
    cached_calls: calls answered from the judge-call cache instead.
    voted: instructions answered by sampled votes because the endpoint lists no logprobs.
    escalated: instructions the cascade sent up from the embedded judge to the LLM.
    disagreements: instructions whose written answer (yes/no) disagreed with the label of the
        probability read at its token; the probability decides, the evidence records both.
    """

    calls: int = 0
    probe_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_calls: int = 0
    voted: int = 0
    escalated: int = 0
    disagreements: int = 0

    def add(self, other: Usage) -> None:
        for name in _FIELDS:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def is_empty(self) -> bool:
        return not any(getattr(self, name) for name in _FIELDS)

    def to_dict(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> Usage:
        """Counts from `to_dict` output; unknown or non-integer entries are ignored."""
        return cls(**{n: v for n, v in data.items() if n in _FIELDS and isinstance(v, int)})


_FIELDS = tuple(f.name for f in fields(Usage))


def row_key(question: Question) -> RowKey:
    return (question.generated_text, question.user_query, question.context)


def item_key(item: DetectRequestItem) -> RowKey:
    """The RowKey of a request item: the same texts its Questions carry."""
    return (item.generated_text, item.user_query, tuple(item.context_documents()))


class UsageLedger:
    """Usage by row texts, filled by judges while the ledger is open."""

    def __init__(self) -> None:
        self._rows: dict[RowKey, Usage] = {}

    def record(self, key: RowKey, usage: Usage) -> None:
        self._rows.setdefault(key, Usage()).add(usage)

    def total(self) -> Usage:
        """Everything recorded (and not yet taken) in this ledger."""
        total = Usage()
        for usage in self._rows.values():
            total.add(usage)
        return total

    def take(self, key: RowKey) -> Usage:
        """The usage of the row with these texts, once: rows with identical texts in one batch
        shared their calls, which are counted on the first of them."""
        return self._rows.pop(key, Usage())


_ledger: contextvars.ContextVar[UsageLedger | None] = contextvars.ContextVar(
    "assay_usage_ledger", default=None
)


def open_ledger() -> UsageLedger | None:
    """The ledger judge calls record to now (the innermost `collect_usage`), if any."""
    return _ledger.get()


@contextmanager
def collect_usage() -> Iterator[UsageLedger]:
    """Open a ledger for the judge calls made inside this block (and tasks it starts)."""
    ledger = UsageLedger()
    token = _ledger.set(ledger)
    try:
        yield ledger
    finally:
        _ledger.reset(token)


def record_usage(question: Question, **counts: int) -> None:
    """Add `counts` (Usage field names) to the row `question` is about, if a ledger is open."""
    record_row_usage(row_key(question), Usage(**counts))


def record_row_usage(key: RowKey, usage: Usage) -> None:
    """Add `usage` to the row with texts `key`, if a ledger is open."""
    ledger = _ledger.get()
    if ledger is not None:
        ledger.record(key, usage)

"""Judge backends and the registry that builds them by name."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

from assay.environment import JUDGE_ENV
from assay.judges.base import Judge, Question, Verdict

__all__ = [
    "Judge",
    "Question",
    "Verdict",
    "built_judge",
    "get_judge",
    "register_judge",
    "judge_names",
    "verdict_settings",
]

_factories: dict[str, Callable[[], Judge]] = {}
_instances: dict[str, Judge] = {}
# Re-entrant: the cascade's factory asks for the judges it wraps while the lock is held.
_lock = threading.RLock()


def _embedded() -> Judge:
    # Imported lazily: loading the model is work we only do when a judge is first asked for.
    from assay.judges.embedded.judge import EmbeddedJudge

    return EmbeddedJudge()


def _openai() -> Judge:
    from assay.judges.openai.judge import OpenAIJudge

    return OpenAIJudge()


def _cascade() -> Judge:
    from assay.judges.cascade import CascadeJudge, band_from_env

    return CascadeJudge(get_judge("embedded"), get_judge("openai"), band_from_env())


def register_judge(name: str, factory: Callable[[], Judge]) -> None:
    """Make `factory` available as judge `name` (used by tests and plugins)."""
    with _lock:
        _factories[name] = factory
        _instances.pop(name, None)


def built_judge(name: str) -> Judge | None:
    """The shared judge `name` if it is built already, else None (building nothing)."""
    with _lock:
        return _instances.get(name)


def judge_names() -> list[str]:
    return sorted(_factories)


def get_judge(name: str = "embedded") -> Judge:
    """The process-wide judge called `name`, built on first use and then shared."""
    with _lock:
        if name not in _instances:
            if name not in _factories:
                known = ", ".join(sorted(_factories))
                from_env = os.environ.get(JUDGE_ENV, "").strip() == name
                source = f" (from ${JUDGE_ENV})" if from_env else ""
                # ValueError, as `Client(judge=...)` raises for the same mistake.
                raise ValueError(f"unknown judge {name!r}{source}; known judges: {known}")
            _instances[name] = _factories[name]()
        return _instances[name]


register_judge("embedded", _embedded)
register_judge("openai", _openai)
register_judge("cascade", _cascade)


def verdict_settings(name: str) -> dict[str, object]:
    """Judge `name` and what decides its verdicts besides the questions (the LLM judge's model
    and how it is asked, the cascade's band): a run resumed or found finished under other
    settings would mix two judges' verdicts in one output. Builds the judge (which calls
    nothing); the embedded judge's verdicts depend on the installed version alone."""
    return {"judge": name, **get_judge(name).verdict_settings()}

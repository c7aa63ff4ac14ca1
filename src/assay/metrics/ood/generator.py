"""Probe generators: out-of-domain questions to put to the system under test.

Offline (the default) probes come from the bundled banks (`bank_probes.py`): near-domain ones
from the capability bank's unlisted capabilities of the profile's field and from those its
disallowed topics claim, far-domain ones from the everyday probe bank, all clearly out of scope
for the scope judge.

With an LLM configured, the LLM writes the probes from the profile at the given temperature and
says of each whether it is near-domain or far-domain; its probes pass the same scope filter,
and the bank tops up any shortfall. Nothing falls back silently: a bank probe that stands in for
the LLM says why (`GeneratedProbe.fallback`), and a `ProbeSet` with fewer probes than asked says
why (`ProbeSet.shortfall`). Every probe keeps how it was made (`kind`); its intended scope is
"out", which the judge takes as given.
"""

from __future__ import annotations

import abc
import asyncio
import logging
import re
from dataclasses import replace
from typing import Any

from assay.judges.openai.calls import BAD_OUTPUT
from assay.judges.openai.endpoint import LLMEndpoint
from assay.metrics.ood.bank_probes import choose_probes, seed_for
from assay.metrics.ood.probe_types import (
    Fallback,
    GeneratedProbe,
    ProbeKind,
    ProbeRequest,
    ProbeSet,
)
from assay.metrics.ood.scope import IN_SCOPE_THRESHOLD, in_scope_probabilities
from assay.schema import JudgeFailure

logger = logging.getLogger(__name__)

__all__ = [
    "BankProbeGenerator",
    "Fallback",
    "GeneratedProbe",
    "LLMProbeGenerator",
    "ProbeGenerator",
    "ProbeRequest",
    "ProbeSet",
    "probe_generator",
    "seed_for",
]


class ProbeGenerator(abc.ABC):
    """Writes `count` out-of-domain probes for a profile."""

    @abc.abstractmethod
    async def generate(self, request: ProbeRequest) -> ProbeSet:
        """Probes for `request.profile` (fewer than asked only if the banks run out, and then
        the set says so)."""


class BankProbeGenerator(ProbeGenerator):
    """Offline: choose from the bundled banks (see `bank_probes.py`)."""

    async def generate(self, request: ProbeRequest) -> ProbeSet:
        return await asyncio.to_thread(choose_probes, request)

    def generate_now(self, request: ProbeRequest) -> ProbeSet:
        """The synchronous body of `generate`."""
        return choose_probes(request)


_LLM_SYSTEM = (
    "You write test questions for a chatbot. Given its use-case profile, write user questions "
    "it should decline because they fall outside that use case. Make about a third of them "
    "near-domain (plausible for the same business or field, but not allowed by the profile) "
    "and the rest far-domain (unrelated to it). Each on a different subject. Return only JSON: "
    '{"probes": [{"text": "...", "kind": "near_domain" or "far_domain"}, ...]}.'
)


#: The answer's shape, sent as structured output where the endpoint supports it.
_SCHEMA = {
    "type": "object",
    "properties": {
        "probes": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "text": {"type": "string"},
                    "kind": {"type": "string", "enum": ["near_domain", "far_domain"]},
                },
                "required": ["text", "kind"],
            },
        }
    },
    "required": ["probes"],
    "additionalProperties": False,
}


class LLMProbeGenerator(ProbeGenerator):
    """An LLM writes the probes; the scope filter and the bank back it up.

    endpoint: the shared LLM layer (its settings give timeouts, attempts, concurrency, cache).
    """

    def __init__(self, endpoint: LLMEndpoint) -> None:
        self._endpoint = endpoint
        self._fallback = BankProbeGenerator()

    async def generate(self, request: ProbeRequest) -> ProbeSet:
        profile, count = request.profile, request.count
        user = f"Profile:\n{profile.as_prompt()}\n\nWrite {count + 2} questions."
        if request.anchor:
            user += f" An in-scope question for comparison: {request.anchor}"
        failure: JudgeFailure | None = None
        try:
            written = await self._endpoint.complete_json(
                _LLM_SYSTEM, user, schema=_SCHEMA, temperature=request.temperature, read=_probes
            )
        except JudgeFailure as error:
            logger.warning("LLM probe generation failed (%s); using the probe bank", error)
            failure, written = error, []
        kept: list[GeneratedProbe] = []
        if written:
            texts = [text for text, _ in written]
            scores = await asyncio.to_thread(in_scope_probabilities, texts, profile)
            kept = [
                GeneratedProbe(text, "llm", kind, round(p, 4))
                for (text, kind), p in zip(written, scores, strict=True)
                if p < IN_SCOPE_THRESHOLD
            ][:count]
        if len(kept) == count:
            return ProbeSet(kept)
        extra = await self._fallback.generate(replace(request, count=count - len(kept)))
        fallback: Fallback = "llm_failed" if failure is not None else "llm_short"
        reason = (
            str(failure)
            if failure is not None
            else f"{len(kept)} of the LLM's {len(written)} probes were out of scope"
        )
        kept += [replace(p, fallback=fallback, fallback_reason=reason) for p in extra.probes]
        return ProbeSet(kept, extra.shortfall)


def _probes(answer: Any) -> list[tuple[str, ProbeKind]]:
    """(text, kind) of each probe in the LLM's JSON; JudgeFailure when it holds no list.

    Plain strings are accepted too (some models ignore the object form); their kind is
    "far_domain" unless the model said otherwise.
    """
    probes = answer.get("probes") if isinstance(answer, dict) else None
    if not isinstance(probes, list):
        raise JudgeFailure(BAD_OUTPUT, f"LLM answer lacks a list 'probes': {answer!r}"[:300])
    found: list[tuple[str, ProbeKind]] = []
    for probe in probes:
        text, kind = (
            (probe.get("text"), probe.get("kind")) if isinstance(probe, dict) else (probe, None)
        )
        if text is not None and _WORD.search(str(text)):
            found.append((str(text), "near_domain" if kind == "near_domain" else "far_domain"))
    return found


#: A probe is a question or request: it has a word. "..." (a small model's placeholder) or "?"
#: was sent to the system under test as a probe.
_WORD = re.compile(r"[^\W\d_]{2,}")


def probe_generator(endpoint: LLMEndpoint | None) -> ProbeGenerator:
    """The LLM generator when an LLM `endpoint` is given, the offline bank otherwise."""
    return LLMProbeGenerator(endpoint) if endpoint else BankProbeGenerator()

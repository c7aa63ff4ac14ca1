"""Probe generators: out-of-domain questions to put to the system under test.

Offline (the default) probes come from the bundled bank. Every bank question the scope judge
finds in scope for the profile is dropped, and so is every topic where that happens often
(`TOPIC_OVERLAP`). A share of the probes (`NEAR_SHARE`) are *near-domain*:
the remaining questions most similar to the profile, plausible for the business but outside it.
The rest are spread across the similarity range. No two probes share a bank topic. At
temperature 0 the choice is deterministic; above 0 it is sampled from a seeded generator,
more spread out the higher the temperature.

With an LLM configured, the LLM writes the probes from the profile at the given temperature;
its probes pass the same scope filter, and the bank tops up any shortfall.
"""

from __future__ import annotations

import abc
import asyncio
import hashlib
import logging
import math
import random
from dataclasses import dataclass, replace

from assay.metrics.ood.bank import bank_vectors, probe_bank
from assay.metrics.ood.embedding import shared_encoder
from assay.metrics.ood.llm import LLMSettings, complete_json
from assay.metrics.ood.profile import UseCaseProfile
from assay.metrics.ood.scope import in_scope_probabilities, scope_features, scope_probabilities
from assay.schema import JudgeFailure

logger = logging.getLogger(__name__)

#: Share of each row's probes taken from the questions nearest the profile.
NEAR_SHARE = 1 / 3
#: Share of a topic's questions judged in scope at which the whole topic is left out.
TOPIC_OVERLAP = 0.2


@dataclass(frozen=True)
class GeneratedProbe:
    """One out-of-domain probe.

    text: the question.
    topic: the bank topic, or "llm" for LLM-written probes.
    near_domain: whether it was chosen as a near-domain probe.
    in_scope_probability: the scope judge's P(in scope) for it (always below 0.5).
    """

    text: str
    topic: str
    near_domain: bool
    in_scope_probability: float


@dataclass(frozen=True)
class ProbeRequest:
    """What to generate probes for.

    profile: the use case the probes must fall outside of.
    count: how many probes to return.
    temperature: 0 for a fixed choice; higher spreads the choice more widely.
    seed: seeds the sampling when temperature > 0.
    anchor: the row's in-domain question; near-domain probes are chosen close to it as well
        as to the profile, so different rows get different probes.
    """

    profile: UseCaseProfile
    count: int
    temperature: float = 0.0
    seed: int = 0
    anchor: str | None = None


def seed_for(key: str) -> int:
    """A stable seed from a string (the row's input_id), the same in every process."""
    return int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:8], "big")


class ProbeGenerator(abc.ABC):
    """Writes `count` out-of-domain probes for a profile."""

    @abc.abstractmethod
    async def generate(self, request: ProbeRequest) -> list[GeneratedProbe]:
        """Probes for `request.profile` (fewer than asked only if the bank runs out of topics)."""


class BankProbeGenerator(ProbeGenerator):
    """Offline: choose from the bundled probe bank by embedding distance from the profile."""

    async def generate(self, request: ProbeRequest) -> list[GeneratedProbe]:
        return await asyncio.to_thread(self.generate_now, request)

    def generate_now(self, request: ProbeRequest) -> list[GeneratedProbe]:
        """The synchronous body of `generate`."""
        profile, temperature, seed, anchor = (
            request.profile,
            request.temperature,
            request.seed,
            request.anchor,
        )
        bank = probe_bank()
        texts = [probe.text for probe in bank]
        features = scope_features(texts, profile, query_vectors=bank_vectors())
        in_scope = scope_probabilities(features)
        closeness = [row["topic_max"] for row in features]
        if anchor:
            to_anchor = bank_vectors() @ shared_encoder().encode([anchor])[0]
            closeness = [(c + float(a)) / 2 for c, a in zip(closeness, to_anchor, strict=True)]
        # Best candidate per topic: its most profile-like question that is still off scope.
        by_topic: dict[str, list[int]] = {}
        overlap: dict[str, list[bool]] = {}
        for index, probe in enumerate(bank):
            overlap.setdefault(probe.topic, []).append(in_scope[index] >= 0.5)
            if in_scope[index] < 0.5:
                by_topic.setdefault(probe.topic, []).append(index)
        # A topic with several in-scope questions overlaps the use case; its remaining
        # questions are likely in scope too (just phrased differently), so none are used.
        for topic, flags in overlap.items():
            if sum(flags) / len(flags) >= TOPIC_OVERLAP and topic in by_topic:
                del by_topic[topic]
        for members in by_topic.values():
            members.sort(key=lambda i: -closeness[i])
        topics = sorted(by_topic, key=lambda t: -closeness[by_topic[t][0]])
        count = min(request.count, len(topics))
        near_count = max(1, round(count * NEAR_SHARE)) if count > 1 else 0
        rng = random.Random(seed)
        chosen: list[tuple[int, bool]] = []
        if temperature == 0:
            near_topics = topics[:near_count]
            rest = topics[near_count:]
            # Evenly spaced over the remaining topics, so probes span near to far; the start
            # and the question within each topic follow the anchor (a hash, not randomness),
            # so the choice is fixed for a row but differs between rows.
            turn = seed_for(anchor) if anchor else 0
            step = len(rest) / max(count - near_count, 1)
            start = turn % max(int(step), 1)
            far_topics = [rest[start + int(k * step)] for k in range(count - near_count)]
            chosen = [(by_topic[t][0], True) for t in near_topics]
            chosen += [(by_topic[t][turn % len(by_topic[t])], False) for t in far_topics]
        else:
            pool = list(topics)
            for slot in range(count):
                near = slot < near_count
                # Near slots favour close topics; the temperature flattens that preference.
                weights = [
                    math.exp(closeness[by_topic[t][0]] / (0.1 * temperature)) if near else 1.0
                    for t in pool
                ]
                topic = rng.choices(pool, weights=weights, k=1)[0]
                pool.remove(topic)
                members = by_topic[topic]
                pick = members[0] if near else rng.choice(members)
                chosen.append((pick, near))
        return [
            GeneratedProbe(bank[i].text, bank[i].topic, near, round(in_scope[i], 4))
            for i, near in chosen
        ]


_LLM_SYSTEM = (
    "You write test questions for a chatbot. Given its use-case profile, write user questions "
    "it should decline because they fall outside that use case. Make about a third of them "
    "near-domain: plausible for the same business but not allowed by the profile. Each on a "
    'different subject. Return only JSON: {"probes": ["...", ...]}.'
)


#: The answer's shape, sent as structured output where the endpoint supports it.
_SCHEMA = {
    "type": "object",
    "properties": {"probes": {"type": "array", "items": {"type": "string"}}},
    "required": ["probes"],
    "additionalProperties": False,
}


class LLMProbeGenerator(ProbeGenerator):
    """An LLM writes the probes; the scope filter and the bank back it up.

    settings: the endpoint and model.
    timeout: seconds for the call.
    """

    def __init__(self, settings: LLMSettings, timeout: float = 60.0) -> None:
        self._settings = settings
        self._timeout = timeout
        self._fallback = BankProbeGenerator()

    async def generate(self, request: ProbeRequest) -> list[GeneratedProbe]:
        profile, count = request.profile, request.count
        user = f"Profile:\n{profile.as_prompt()}\n\nWrite {count + 2} questions."
        if request.anchor:
            user += f" An in-scope question for comparison: {request.anchor}"
        try:
            answer = await complete_json(
                self._settings, _LLM_SYSTEM, user, request.temperature, self._timeout, _SCHEMA
            )
            written = [str(p) for p in answer.get("probes", []) if str(p).strip()]
        except (JudgeFailure, AttributeError) as error:
            logger.warning("LLM probe generation failed (%s); using the probe bank", error)
            written = []
        kept: list[GeneratedProbe] = []
        if written:
            scores = await asyncio.to_thread(in_scope_probabilities, written, profile)
            kept = [
                GeneratedProbe(text, "llm", False, round(p, 4))
                for text, p in zip(written, scores, strict=True)
                if p < 0.5
            ][:count]
        if len(kept) < count:
            extra = await self._fallback.generate(replace(request, count=count - len(kept)))
            kept.extend(extra)
        return kept


def probe_generator(settings: LLMSettings | None) -> ProbeGenerator:
    """The LLM generator when `settings` is given, the offline bank otherwise."""
    return LLMProbeGenerator(settings) if settings else BankProbeGenerator()

"""What a probe generator is asked for and what it returns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from assay.metrics.ood.profile import UseCaseProfile

#: How a case was made: the row's own in-domain question, or a probe near to or far from the
#: profile's field.
ProbeKind = Literal["in_domain", "near_domain", "far_domain"]
#: Why a bank probe stands in for an LLM-written one: the LLM call failed, or the LLM's probes
#: were too few once the scope filter had dropped those in scope.
Fallback = Literal["llm_failed", "llm_short"]
#: How the topic of a bank probe starts when it asks for something the profile disallows.
DISALLOWED_TOPIC = "disallowed: "


@dataclass(frozen=True)
class GeneratedProbe:
    """One out-of-domain probe; its intended scope is always "out".

    text: the question.
    topic: the capability ("domain: capability") or bank topic it comes from, or "llm".
    kind: "near_domain" or "far_domain".
    in_scope_probability: the scope judge's P(in scope) for it when it was chosen.
    fallback: set when the probe comes from the bank although an LLM was to write it: why.
    fallback_reason: with fallback, the details (e.g. the LLM call's error).
    """

    text: str
    topic: str
    kind: ProbeKind
    in_scope_probability: float
    fallback: Fallback | None = None
    fallback_reason: str | None = None


@dataclass(frozen=True)
class ProbeSet:
    """What a generator wrote for one request.

    probes: the probes, at most the count asked for.
    shortfall: why there are fewer than asked (None when there are not).
    """

    probes: list[GeneratedProbe]
    shortfall: str | None = None


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

"""One call to the system under test before a run, so an unreachable or mis-addressed system
fails at once with the error (and a hint at the right adapter kind when the reply's shape
says so), instead of after every probe of every row has failed."""

from __future__ import annotations

import asyncio

from assay.metrics.ood.config import OODMetricConfig
from assay.metrics.ood.sut import Prompt, SystemUnderTest, ask_with_retries
from assay.schema import RequestValidationError


async def preflight(sut: SystemUnderTest, prompt: Prompt, config: OODMetricConfig) -> str:
    """Ask `sut` one question (with the config's timeout and retries); return its reply.

    sut: the system under test.
    prompt: what to ask (an in-domain question of the run, so the call is a real one).
    config: supplies timeout_seconds and n_sut_retries.
    Raises RequestValidationError (field "sut") with the failure, and the hint when there is one.
    """
    reply = await ask_with_retries(
        sut,
        prompt,
        retries=config.n_sut_retries,
        timeout=config.timeout_seconds,
        limit=asyncio.Semaphore(1),
    )
    if reply.text is None:
        message = f"{sut.describe} did not answer a first question ({reply.kind}): {reply.error}"
        if reply.hint:
            message += f"; {reply.hint}"
        raise RequestValidationError("sut", message)
    return reply.text

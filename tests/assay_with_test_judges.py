"""The `assay` command with two test-only judges registered, for subprocess tests.

- "light": instant and deterministic (probability from the response's length), for runs whose
  size, not judging quality, is under test. With $ASSAY_TEST_JUDGE_LOG set, it appends one line
  per distinct response it judges to that file, so a test can count what was scored.
- "slow": "light" that sleeps $ASSAY_TEST_JUDGE_DELAY seconds per call, so a test can kill a run
  part-way through.
- "picky": "light" that fails (kind "timeout") on every response containing "FAIL", so a test
  can have some rows error.

With $ASSAY_TEST_REPORT_RSS set, prints the process's peak resident memory (KiB) to stderr as
`max_rss_kib=N` when the command ends.
"""

from __future__ import annotations

import asyncio
import os
import resource
import sys
from collections.abc import Sequence

from assay.judges import Judge, Question, Verdict, register_judge
from assay.schema import JudgeFailure


class LightJudge(Judge):
    name = "light"

    async def answer(self, questions: Sequence[Question]) -> list[Verdict | JudgeFailure]:
        log = os.environ.get("ASSAY_TEST_JUDGE_LOG")
        if log:
            with open(log, "a", encoding="utf-8") as handle:
                handle.writelines(f"{text!r}\n" for text in {q.generated_text for q in questions})
        return [Verdict(0.2 + 0.6 * (len(q.generated_text) % 7) / 6) for q in questions]


class SlowJudge(LightJudge):
    name = "slow"

    async def answer(self, questions: Sequence[Question]) -> list[Verdict | JudgeFailure]:
        await asyncio.sleep(float(os.environ.get("ASSAY_TEST_JUDGE_DELAY", "0.05")))
        return await super().answer(questions)


class PickyJudge(LightJudge):
    name = "picky"

    async def answer(self, questions: Sequence[Question]) -> list[Verdict | JudgeFailure]:
        verdicts = await super().answer(questions)
        return [
            JudgeFailure("timeout", "the test judge fails this row")
            if "FAIL" in q.generated_text
            else verdict
            for q, verdict in zip(questions, verdicts, strict=True)
        ]


def main() -> None:
    register_judge("light", LightJudge)
    register_judge("slow", SlowJudge)
    register_judge("picky", PickyJudge)
    from assay.cli import app

    try:
        app()
    finally:
        if os.environ.get("ASSAY_TEST_REPORT_RSS"):
            print(f"max_rss_kib={peak_rss_kib()}", file=sys.stderr)


def peak_rss_kib() -> int:
    """This process's own peak RSS. Not getrusage's ru_maxrss: Linux carries that across exec,
    so a child forked from a big parent (pytest with a model loaded) would report the parent's."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


if __name__ == "__main__":
    main()

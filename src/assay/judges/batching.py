"""Micro-batching: answer the Questions of many concurrent requests in one backend call.

The embedded judge is fastest when one encoder call sees many texts, and on a small machine
two requests encoding at once only fight over the same cores. `BatchingJudge` therefore
queues every caller's Questions, lets one worker thread take whatever has arrived within a
few milliseconds of the first, answers them with one call to the wrapped judge, and hands each
caller its own slice. While a batch is being computed the next one keeps filling up, so under
load batches grow on their own and the event loop never runs model work.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import queue
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from assay.judges import get_judge, register_judge
from assay.judges.base import Judge, Question, Verdict
from assay.judges.isolation import answer_each_item_sync
from assay.schema import JudgeFailure

logger = logging.getLogger(__name__)

Answers = list[Verdict | JudgeFailure]


@dataclass
class _Pending:
    questions: list[Question]
    future: concurrent.futures.Future[Answers]


class BatchingJudge(Judge):
    """Wraps `inner` so that concurrent `answer` calls share backend calls.

    inner: the judge doing the work; if it has `answer_sync` (the embedded judge does) that is
        called directly on the worker thread.
    window_seconds: how long the worker waits for more callers after the first one arrives.
    max_questions: a batch stops growing once it holds this many Questions.
    """

    def __init__(
        self, inner: Judge, window_seconds: float = 0.005, max_questions: int = 512
    ) -> None:
        if window_seconds < 0 or max_questions < 1:
            raise ValueError("window_seconds must be >= 0 and max_questions >= 1")
        self.inner = inner
        self.name = inner.name
        self.window_seconds = window_seconds
        self.max_questions = max_questions
        self.batches = 0  # backend calls made so far (observable in tests and logs)
        self._queue: queue.Queue[_Pending] = queue.Queue()
        self._worker: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None

    async def answer(self, questions: Sequence[Question]) -> Answers:
        if not questions:
            return []
        self._ensure_worker()
        future: concurrent.futures.Future[Answers] = concurrent.futures.Future()
        self._queue.put(_Pending(list(questions), future))
        return await asyncio.wrap_future(future)

    def _ensure_worker(self) -> None:
        with self._start_lock:
            if self._worker is None:
                self._worker = threading.Thread(
                    target=self._serve, name=f"batching-{self.name}", daemon=True
                )
                self._worker.start()

    def _serve(self) -> None:
        while True:
            batch = [self._queue.get()]
            size = len(batch[0].questions)
            deadline = time.monotonic() + self.window_seconds
            while size < self.max_questions:
                remaining = deadline - time.monotonic()
                try:
                    pending = self._queue.get(timeout=remaining) if remaining > 0 else None
                except queue.Empty:
                    pending = None
                if pending is None:
                    # The window is over; still take whatever is already waiting.
                    try:
                        pending = self._queue.get_nowait()
                    except queue.Empty:
                        break
                batch.append(pending)
                size += len(pending.questions)
            self._answer(batch)

    def _answer(self, batch: list[_Pending]) -> None:
        questions = [question for pending in batch for question in pending.questions]
        self.batches += 1
        logger.debug("answering %d questions from %d callers", len(questions), len(batch))
        try:
            answers = self._call_inner(questions)
            if len(answers) != len(questions):
                raise RuntimeError(f"judge returned {len(answers)} answers for {len(questions)}")
        except Exception as error:  # one bad batch must not kill the worker thread
            # The batch mixes many callers' items; one of them may be what broke it. Answer
            # each item on its own so that only the guilty one fails.
            logger.warning("judge %s failed on a batch (%s); item by item now", self.name, error)
            answers = answer_each_item_sync(self._call_inner, questions)
        start = 0
        for pending in batch:
            end = start + len(pending.questions)
            # A caller that gave up (its request timed out) may cancel at any moment.
            with contextlib.suppress(concurrent.futures.InvalidStateError):
                pending.future.set_result(answers[start:end])
            start = end

    def _call_inner(self, questions: list[Question]) -> Answers:
        answer_sync = getattr(self.inner, "answer_sync", None)
        if callable(answer_sync):
            result: Answers = answer_sync(questions)
            return result
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        return self._loop.run_until_complete(self.inner.answer(questions))


def use_batching(
    name: str = "embedded", window_seconds: float = 0.005, max_questions: int = 512
) -> BatchingJudge:
    """Replace judge `name` in this process's registry by a batching wrapper around it.

    Builds the judge (loading its model) if needed; calling it again returns the same wrapper.
    """
    judge = get_judge(name)
    if isinstance(judge, BatchingJudge):
        return judge
    batching = BatchingJudge(judge, window_seconds=window_seconds, max_questions=max_questions)
    register_judge(name, lambda: batching)
    get_judge(name)  # cache the wrapper as the shared instance
    return batching

"""Run Assay's async core from synchronous code without ever nesting event loops."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` to completion and return its result (or raise its exception).

    coro: the coroutine to run; it is always consumed, even when it raises.

    With no event loop running in this thread the coroutine runs under `asyncio.run`. When a loop
    is already running here (a notebook, or sync code called from a coroutine), `asyncio.run` would
    fail and re-entering the loop is not possible, so the coroutine gets its own loop in a worker
    thread and this thread waits for it. Context variables are carried over to the worker.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        running = False
    else:
        running = True
    if not running:
        return asyncio.run(coro)
    context = contextvars.copy_context()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="assay-sync") as pool:
        return pool.submit(context.run, asyncio.run, coro).result()

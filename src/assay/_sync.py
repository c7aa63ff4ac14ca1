"""Run Assay's async core from synchronous code without ever nesting event loops."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ParamSpec, TypeVar

T = TypeVar("T")
P = ParamSpec("P")


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


def blocking(function: Callable[P, Coroutine[Any, Any, T]]) -> Callable[P, T]:
    """A synchronous version of the async `function`, with its signature, run by `run_sync`."""

    @functools.wraps(function)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        return run_sync(function(*args, **kwargs))

    wrapper.__doc__ = (
        f"Synchronous `{function.__name__}` (safe to call whether or not an event loop is "
        f"running).\n\n{function.__doc__ or ''}"
    )
    return wrapper


class LoopThread:
    """An event loop of its own on a daemon thread, for a sync facade over async code whose state
    belongs to one loop (an `httpx.AsyncClient`'s connection pool): `asyncio.run` per call would
    give every call a new loop and strand that state. Started on first use; safe to share
    between threads, whose calls then run concurrently on the one loop.

    name: the thread's name (shows in stack dumps).
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def started(self) -> bool:
        return self._loop is not None

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the loop thread and wait for its result (or exception)."""
        future = asyncio.run_coroutine_threadsafe(coro, self._running_loop())
        try:
            return future.result()
        except BaseException:
            # Interrupted while waiting (Ctrl-C): stop the call as well. A no-op when the
            # coroutine itself raised, since it is done by then.
            future.cancel()
            raise

    def close(self) -> None:
        """Stop the loop and its thread; a later `run` starts a new one."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name=self._name, daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

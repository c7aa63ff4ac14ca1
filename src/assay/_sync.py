"""Run Assay's async core from synchronous code without ever nesting event loops."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import threading
import weakref
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
    between threads, whose calls then run concurrently on the one loop. The thread ends on
    `close()`, or when this object is garbage-collected, so an owner that is never closed does
    not leave a thread behind.

    name: the thread's name (shows in stack dumps).
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop: weakref.finalize[Any, Any] | None = None

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
        """Stop the loop and wait for its thread; a later `run` starts a new one."""
        with self._lock:
            thread, stop = self._thread, self._stop
            self._loop = self._thread = self._stop = None
        if thread is None or stop is None:
            return
        stop()
        thread.join()

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=_serve, args=(loop,), name=self._name, daemon=True)
                thread.start()
                # Holds the loop, not this object, so collecting this object can stop it.
                self._stop = weakref.finalize(self, loop.call_soon_threadsafe, loop.stop)
                self._loop, self._thread = loop, thread
            return self._loop


def _serve(loop: asyncio.AbstractEventLoop) -> None:
    """A `LoopThread`'s thread: run `loop` until it is stopped, then close it."""
    try:
        loop.run_forever()
    finally:
        loop.close()

"""Run Assay's async core from synchronous code without ever nesting event loops."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import functools
import os
import threading
import weakref
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ParamSpec, TypeVar

T = TypeVar("T")
P = ParamSpec("P")


async def in_daemon_thread(function: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`function(*args, **kwargs)` in a new daemon thread, its context variables carried over.
    Unlike `asyncio.to_thread`, nothing waits for the thread once the caller stops waiting: an
    event loop that closes (after a timeout, or Ctrl-C) does not join it, nor does the
    interpreter at exit. For calls that may block for ever (a user's function, a Ray wait)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()
    context = contextvars.copy_context()

    def settle(value: Any, error: BaseException | None) -> None:
        if done.done():  # the caller stopped waiting (a timeout cancelled it)
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(value)

    def work() -> None:
        try:
            outcome: tuple[Any, BaseException | None] = (
                context.run(function, *args, **kwargs),
                None,
            )
        except BaseException as error:  # handed to the awaiting coroutine
            outcome = (None, error)
        with contextlib.suppress(RuntimeError):  # the loop closed while the call ran
            loop.call_soon_threadsafe(settle, *outcome)

    threading.Thread(target=work, name="assay-call", daemon=True).start()
    return await done


def load_once(function: Callable[..., T]) -> Callable[..., T]:
    """`functools.cache` for a loader that threads may call at once: the first call for its
    arguments builds the value while the others wait, then all share it. (`cache` alone lets
    each thread that asks before the first has finished build its own: six parallel first calls
    built the agreement model six times; two OOD rows built two encoders, and the second missed
    the shipped bank vectors.) `cache_clear` is kept for tests."""
    cached = functools.cache(function)
    lock = threading.Lock()

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        with lock:
            return cached(*args, **kwargs)

    wrapper.cache_clear = cached.cache_clear  # type: ignore[attr-defined]
    return wrapper


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
        # The process that started the thread: a forked child inherits the loop but not the
        # thread that runs it, so its calls would wait forever; it starts its own.
        self._pid = os.getpid()

    @property
    def started(self) -> bool:
        return self._loop is not None

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the loop thread and wait for its result (or exception)."""
        future = asyncio.run_coroutine_threadsafe(coro, self._running_loop())
        try:
            return future.result()
        except concurrent.futures.CancelledError:
            # `close()` from another thread cancelled this call (it waited forever before).
            raise RuntimeError("the client was closed while this call was running") from None
        except BaseException:
            # Interrupted while waiting (Ctrl-C): stop the call as well. A no-op when the
            # coroutine itself raised, since it is done by then.
            future.cancel()
            raise

    def close(self, last: Callable[[], Coroutine[Any, Any, Any]] | None = None) -> None:
        """Cancel the calls still running (their callers get RuntimeError), run `last` (e.g.
        closing a connection pool), stop the loop and wait for its thread; a later `run`
        starts a new one."""
        with self._lock:
            loop, thread, stop = self._loop, self._thread, self._stop
            self._loop = self._thread = self._stop = None
        if loop is None or thread is None or stop is None or self._pid != os.getpid():
            return
        if thread is not threading.current_thread():
            finished = asyncio.run_coroutine_threadsafe(_finish(last), loop)
            with contextlib.suppress(Exception):
                finished.result(timeout=CLOSE_SECONDS)
        stop()
        thread.join()

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._pid != os.getpid():  # forked: the parent's loop has no thread here
                self._pid = os.getpid()
                self._loop = self._thread = self._stop = None
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=_serve, args=(loop,), name=self._name, daemon=True)
                thread.start()
                # Holds the loop, not this object, so collecting this object can stop it.
                self._stop = weakref.finalize(self, loop.call_soon_threadsafe, loop.stop)
                self._loop, self._thread = loop, thread
            return self._loop


#: Longest `LoopThread.close` waits for cancelled calls to finish.
CLOSE_SECONDS = 5.0


async def _finish(last: Callable[[], Coroutine[Any, Any, Any]] | None) -> None:
    """Cancel every other task on this loop, wait until they have finished, then run `last`."""
    others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in others:
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)
    if last is not None:
        await last()


def _serve(loop: asyncio.AbstractEventLoop) -> None:
    """A `LoopThread`'s thread: run `loop` until it is stopped, then close it."""
    try:
        loop.run_forever()
    finally:
        loop.close()

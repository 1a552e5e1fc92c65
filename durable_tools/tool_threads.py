"""The bounded thread pool that sync tools run in.

A sync tool (`def`, not `async def`) runs in a thread so it does not block
the worker's event loop. Python cannot stop a thread, so a sync call that
was cancelled or timed out keeps its thread until it returns: in the event
loop's default executor (`asyncio.to_thread`) such calls would pile up
beside their retries without bound. The durable loop's worker owns one
`ToolThreads` instead, sized like its activity slots, and the tool activity
makes it current (`ToolThreads.use`) while a call runs; `run_sync` then
runs the tool there. Outside a worker (plain `Toolkit.run`), `run_sync` uses
the event loop's default executor as `asyncio.to_thread` does.

A cancelled sync tool stops only if it looks: `ToolContext.cancelled` (or
`ctx.raise_if_cancelled()`, or `ctx.cancellation.wait(seconds)` as an
interruptible sleep) tells it that its attempt was cancelled or timed out.
Until it returns, its thread counts against the pool's bound.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import threading
from collections.abc import Callable, Generator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, Final

__all__ = ["DEFAULT_TOOL_THREADS", "ToolThreads", "run_sync"]

DEFAULT_TOOL_THREADS: Final[int] = 100
"""Threads of a pool given no size: the Temporal SDK's default activity slots (100)."""

_CURRENT: contextvars.ContextVar[ToolThreads | None] = contextvars.ContextVar(
    "durable_tools_tool_threads", default=None
)


class ToolThreads:
    """A bounded pool of threads for sync tools, started lazily.

    Args:
        size: Most sync tool calls running at once; more wait for a thread
            (default `DEFAULT_TOOL_THREADS`, 100). `None` leaves the size to
            `configure`, e.g. the worker's `max_concurrent_activities`.

    Raises:
        ValueError: `size` is less than 1.

    Example:
        ```python
        threads = ToolThreads(8)
        with threads.use():
            await tool.run(parsed, emit, ctx)  # a sync run takes one of 8 threads
        threads.shutdown()
        ```
    """

    def __init__(self, size: int | None = None) -> None:
        if size is not None and size < 1:
            raise ValueError(f"ToolThreads needs size >= 1, not {size}")
        self._given = size
        self._size = size or DEFAULT_TOOL_THREADS
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    @property
    def size(self) -> int:
        """Most threads the pool runs at once."""
        return self._size

    def configure(self, default: int | None) -> None:
        """Take `default` as the size unless one was given (the worker's activity slots).

        Args:
            default: The size to use when the constructor got none; `None`
                or less than 1 keeps the current size. A pool already running
                keeps its size until `shutdown`.
        """
        if self._given is None and default is not None and default >= 1:
            self._size = default

    def executor(self) -> ThreadPoolExecutor:
        """The pool, started on first use (again after `shutdown`)."""
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(
                    max_workers=self._size, thread_name_prefix="durable-tools-tool"
                )
            return self._pool

    def shutdown(self) -> None:
        """Stop the pool: queued calls are cancelled, running ones finish in their threads."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)

    @contextmanager
    def use(self) -> Generator[None]:
        """Make this pool the one `run_sync` uses in the current context."""
        token = _CURRENT.set(self)
        try:
            yield
        finally:
            _CURRENT.reset(token)


async def run_sync(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """Run a sync function in the current `ToolThreads` (else the default executor).

    The function runs with a copy of the caller's context variables, as with
    `asyncio.to_thread`.

    Args:
        fn: The function.
        *args: Its positional arguments.
        **kwargs: Its keyword arguments.

    Returns:
        What `fn` returned.

    Raises:
        asyncio.CancelledError: The caller was cancelled; `fn` keeps running
            in its thread until it returns.
        Exception: Whatever `fn` raised.
    """
    threads = _CURRENT.get()
    if threads is None:
        return await asyncio.to_thread(fn, *args, **kwargs)
    context = contextvars.copy_context()
    call = functools.partial(context.run, fn, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(threads.executor(), call)

"""The worker process's memory allocator: jemalloc where the system has it.

A worker that served a burst of conversations keeps memory after they end:
not its objects (none of them is left, `heap_return.py`) but the pages that
a few objects allocated during the burst and outliving it keep, one small
object holding a whole page or arena. CPython's small-object allocator
(pymalloc) frees an arena (1 MiB) only when every block in it is free, and
glibc's malloc hands back only whole free pages, so after 500 conversations
at once on one worker its RSS stayed at 1.6x to 1.7x its start, and bare
Temporal's worker at 1.5x (issue 26, item 4). Measured after the same burst
(`bench/scale.py --sizes 500`, one worker, after the drain and a
collection, RSS / RSS at start): pymalloc on glibc 1.63x to 1.69x
(`MALLOC_ARENA_MAX=2`: 1.69x); every object on glibc's malloc
(`PYTHONMALLOC=malloc`) 1.73x; on mimalloc 2.0 1.93x and 3.4 1.68x (1.34x
with no purge delay); on jemalloc 5.3 with its defaults 1.91x, purging at
once 1.36x, and with one arena, no thread caches and purging at once
(`JEMALLOC_CONF` here) 1.15x.

So `durable-tools worker` runs on jemalloc with that configuration when the
system has the library (Debian and Ubuntu: `libjemalloc2`; the image built
from `deploy/Dockerfile` does): the command starts the interpreter again
with `LD_PRELOAD` naming it, `PYTHONMALLOC=malloc` (every object through
it) and `MALLOC_CONF` (`reexec`, once, before the worker starts; the
process id stays the same; only when the process is the command itself,
`as_command`). Without the library it runs on the system's
allocator and says so in its startup line. `DURABLE_TOOLS_ALLOCATOR=system`
(or `--allocator system`) keeps the system's; `jemalloc` requires it.

A `MALLOC_CONF` already in the environment is kept, and an `LD_PRELOAD`
already naming a jemalloc is left alone. A worker run from Python
(`run_worker`) uses the interpreter it is in: start it with the variables
`environment` returns to get the same.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import sys
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Final, Literal, ParamSpec, TypeVar, cast

__all__ = [
    "ALLOCATOR_ENV",
    "JEMALLOC_CONF",
    "CHOICES",
    "AllocatorChoice",
    "AllocatorUnavailable",
    "ThreadCacheExecutor",
    "as_command",
    "cache_this_thread",
    "describe",
    "environment",
    "find_jemalloc",
    "flush_this_thread",
    "in_use",
    "is_command",
    "jemalloc_purge",
    "reexec",
]

ALLOCATOR_ENV: Final = "DURABLE_TOOLS_ALLOCATOR"
"""The environment variable choosing the allocator: `auto` (default), `jemalloc`, `system`."""

JEMALLOC_CONF: Final = (
    "background_thread:true,narenas:1,tcache:false,dirty_decay_ms:1000,muzzy_decay_ms:0,"
    "slab_sizes:1-4096:1"
)
"""jemalloc's configuration for a worker (`MALLOC_CONF`; see the module for the measurements).

One arena (threads share its slabs instead of each pinning its own), no
per-thread caches (an object a thread keeps cached keeps its slab: with
small caches, 1.34x), and freed pages go back to the system within about a
second (`dirty_decay_ms`), by jemalloc's own thread (`background_thread`:
without it decay happens only as the worker allocates, so an idle worker
never gets there), straight to the system (`muzzy_decay_ms:0`: `MADV_FREE`d
pages count in RSS until the kernel wants them). Every small size class
takes its regions from one-page slabs (`slab_sizes:1-4096:1`; jemalloc's
own are up to 7 pages): an object that outlives a burst then holds one
page, not seven. After 1,200 and 2,000 conversations at once (past the
1,000 cached runs) RSS after the drain measured 1.16x and 1.19x the start,
against 1.20x and 1.23x with jemalloc's slabs, at the same CPU per call
(docs/operations.md, "What a burst past the cache left behind").
"""

_REEXECED: Final = "DURABLE_TOOLS_ALLOCATOR_REEXEC"
"""Set in the environment of the interpreter `reexec` starts, so it never starts another."""

AllocatorChoice = Literal["auto", "jemalloc", "system"]

CHOICES: Final[tuple[AllocatorChoice, ...]] = ("auto", "jemalloc", "system")
"""The values `--allocator` and `ALLOCATOR_ENV` take."""

_as_command: list[bool] = [False]
"""Whether this process is the `durable-tools` command (`as_command`), not a host calling it."""


def as_command() -> None:
    """Marks this process as the `durable-tools` command, which `reexec` may start again.

    Called by the console script and `python -m durable_tools.worker.cli`
    before the CLI runs. A process that calls the CLI's functions itself
    (an application, a test with typer's `CliRunner`) is never replaced.
    """
    _as_command[0] = True


def is_command() -> bool:
    """Whether `as_command` marked this process."""
    return _as_command[0]


class AllocatorUnavailable(RuntimeError):
    """`jemalloc` was asked for and the system has no jemalloc library."""


def find_jemalloc() -> str | None:
    """The jemalloc shared library the dynamic loader would find, or None.

    Returns:
        Its name for `LD_PRELOAD` (e.g. `libjemalloc.so.2`, found through
        the loader's cache as `ctypes.util.find_library` does), or None
        where there is none or the platform is not Linux.
    """
    if not sys.platform.startswith("linux"):
        return None
    return ctypes.util.find_library("jemalloc")


_Mallctl = Callable[[bytes, object, object, object, int], int]
"""`int mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen)`."""


@functools.cache
def _mallctl() -> _Mallctl | None:
    """The `mallctl` of jemalloc in this process (preloaded or linked), or None (looked up once).

    Called through `ctypes.PyDLL`, which keeps the GIL: a call takes
    microseconds, and `ctypes.CDLL` would release the GIL around it, so a
    workflow thread (`ThreadCacheExecutor`, two calls per activation) would
    then wait to get it back from a busy event loop, up to the interpreter's
    switch interval (5 ms) each time.
    """
    try:
        mallctl: Any = ctypes.PyDLL(None).mallctl
    except (AttributeError, OSError):
        return None
    mallctl.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p]
    mallctl.argtypes += [ctypes.c_void_p, ctypes.c_size_t]
    mallctl.restype = ctypes.c_int
    return cast("_Mallctl", mallctl)


def in_use() -> Literal["jemalloc", "system"]:
    """Which allocator this process's `malloc` is: `jemalloc` when its `mallctl` is loaded."""
    return "jemalloc" if _mallctl() is not None else "system"


def describe() -> str:
    """One line for a worker's startup line, e.g. `memory allocator jemalloc`.

    Names what every object goes through: `jemalloc`, or `system` with
    pymalloc for small objects unless `PYTHONMALLOC` says otherwise.
    """
    if in_use() == "jemalloc":
        return "memory allocator jemalloc"
    return "memory allocator system (install libjemalloc2 to return more after bursts)"


def jemalloc_purge() -> bool:
    """Hands every jemalloc arena's unused dirty pages back now (`arena.<all>.purge`).

    Returns:
        False where jemalloc is not this process's allocator (nothing done).
    """
    mallctl = _mallctl()
    if mallctl is None:
        return False
    all_arenas = 4096  # MALLCTL_ARENAS_ALL in jemalloc 5
    return mallctl(f"arena.{all_arenas}.purge".encode(), None, None, None, 0) == 0


def _thread_cache(name: str, value: bool | None = None) -> bool:
    mallctl = _mallctl()
    if mallctl is None:
        return False
    new = ctypes.byref(ctypes.c_bool(value)) if value is not None else None
    return mallctl(name.encode(), None, None, new, 1 if value is not None else 0) == 0


def cache_this_thread() -> bool:
    """Gives the calling thread a jemalloc thread cache (`thread.tcache.enabled`).

    `JEMALLOC_CONF` turns thread caches off: each idle thread's cache keeps
    the slabs its objects are in. The thread that runs the worker's event
    loop (its activities, the SDK's polls and completions) allocates most
    and is never idle for long, so it keeps one, emptied by
    `flush_this_thread` when memory is handed back (`HeapReturn`).

    Returns:
        False where jemalloc is not this process's allocator (nothing done).
    """
    return _thread_cache("thread.tcache.enabled", True)


def flush_this_thread() -> bool:
    """Empties the calling thread's jemalloc thread cache (`thread.tcache.flush`).

    Returns:
        False where jemalloc is not this process's allocator (nothing done).
    """
    return _thread_cache("thread.tcache.flush")


_P = ParamSpec("_P")
_T = TypeVar("_T")


class ThreadCacheExecutor(ThreadPoolExecutor):
    """A thread pool whose threads allocate through a jemalloc thread cache, emptied after a task.

    For the SDK's workflow task executor (`Worker(workflow_task_executor=)`,
    set by `DurableToolsPlugin` where jemalloc is the allocator): each
    workflow activation runs on one of these threads and allocates and
    frees thousands of objects. Without a thread cache (`JEMALLOC_CONF`
    turns them off) each of those goes to the shared arena under its lock;
    with one, it stays in the thread. The cache is turned off again, which
    empties it, when the task ends, so a thread that then waits for work
    holds no slab: the pool's threads outnumber the tasks running
    after a burst (one per activation that ever ran at once, up to
    `max_workers`), and idle caches would keep what the burst left.
    Elsewhere (the system's allocator) it is a plain `ThreadPoolExecutor`.

    Measured at 500 conversations (`bench/scale.py`, ours alone, four runs
    interleaved with the SDK's plain executor, `SCALE_WORKER_PLAIN_EXECUTOR`):
    3% to 5% less worker CPU, the same RSS after the drain. Caches for every
    thread instead (`tcache:true`): RSS after the drain 1.38x the start
    where this keeps 1.15x.
    """

    def submit(self, fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs) -> Future[_T]:
        """Run `fn(*args, **kwargs)` on a pool thread with a thread cache (see the class)."""
        if _mallctl() is None:
            return super().submit(fn, *args, **kwargs)
        return super().submit(_with_thread_cache, functools.partial(fn, *args, **kwargs))


def _with_thread_cache(call: Callable[[], _T]) -> _T:
    # Off again at the end, not only emptied: what the pool's thread frees
    # after the task (the work item, its future's waiters) goes back too.
    cache_this_thread()
    try:
        return call()
    finally:
        _thread_cache("thread.tcache.enabled", False)


def environment(
    choice: AllocatorChoice = "auto", base: Mapping[str, str] | None = None
) -> dict[str, str] | None:
    """The environment to start a worker's interpreter with, or None to keep this one.

    Args:
        choice: `auto` (jemalloc when found), `jemalloc` (required), or
            `system` (never changes anything).
        base: The environment to extend (default `os.environ`).

    Returns:
        `base` with `LD_PRELOAD` (the library first, what was there after),
        `PYTHONMALLOC=malloc` and `MALLOC_CONF` (`JEMALLOC_CONF` unless
        one is set); None when `choice` is `system`, when this process
        already runs on jemalloc or was already started again, or when
        `auto` finds no library.

    Raises:
        AllocatorUnavailable: `choice` is `jemalloc` and there is no library.
        ValueError: `choice` is none of the three.
    """
    if choice not in CHOICES:
        raise ValueError(f"allocator must be auto, jemalloc or system, not {choice!r}")
    env = dict(os.environ if base is None else base)
    if choice == "system" or in_use() == "jemalloc" or env.get(_REEXECED):
        return None
    library = find_jemalloc()
    if library is None:
        if choice == "jemalloc":
            raise AllocatorUnavailable(
                "no jemalloc library on this system (Debian and Ubuntu: apt install libjemalloc2)"
            )
        return None
    preload = env.get("LD_PRELOAD", "")
    env["LD_PRELOAD"] = f"{library} {preload}".strip()
    env["PYTHONMALLOC"] = "malloc"
    env.setdefault("MALLOC_CONF", JEMALLOC_CONF)
    env[_REEXECED] = "1"
    return env


def reexec(choice: AllocatorChoice = "auto") -> None:
    """Start this command again on jemalloc (`environment`), or return to go on as is.

    Replaces the process image (`os.execve`, same process id, same
    arguments as `sys.orig_argv`); call it before starting threads or
    opening connections. Returns when there is nothing to change.

    Raises:
        AllocatorUnavailable: `choice` is `jemalloc` and there is no library.
        ValueError: `choice` is none of `auto`, `jemalloc`, `system`.
    """
    env = environment(choice)
    if env is None:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)  # noqa: S606

"""A liveness signal for container health checks: a file the running worker keeps fresh.

A worker makes only outbound connections, so there is no port to probe.
`run_worker(health_file=...)` (`durable-tools worker --health-file PATH`)
rewrites the file every `TOUCH_INTERVAL` seconds while the worker runs and
removes it when the worker stops; `durable-tools health --file PATH` exits 0
when the file is younger than `--max-age` seconds and 1, with one line,
otherwise. It proves the worker's event loop is alive and its poll loop has
not ended; it does not probe the Temporal server (`temporal operator cluster
health` does that).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from pathlib import Path

__all__ = ["DEFAULT_MAX_AGE", "TOUCH_INTERVAL", "health_problem", "keep_fresh"]

TOUCH_INTERVAL = 10.0
"""Seconds between two writes of the health file."""

DEFAULT_MAX_AGE = 30.0
"""Seconds after which `durable-tools health` calls the file stale (3 missed writes)."""


async def keep_fresh(path: Path, interval: float = TOUCH_INTERVAL) -> None:
    """Write the current time to `path` every `interval` seconds until cancelled; then remove it."""
    try:
        while True:
            temporary = path.with_name(f".{path.name}.tmp")
            temporary.write_text(f"{time.time():.3f}\n")
            os.replace(temporary, path)  # atomic: a reader never sees a half-written file
            await asyncio.sleep(interval)
    finally:
        with contextlib.suppress(OSError):
            path.unlink()


def health_problem(path: Path, max_age: float = DEFAULT_MAX_AGE) -> str | None:
    """Why the worker behind `path` is not healthy, or `None` when it is.

    Args:
        path: The worker's `--health-file`.
        max_age: Oldest acceptable write, in seconds (default 30).
    """
    try:
        age = time.time() - path.stat().st_mtime
    except FileNotFoundError:
        return f"{path} does not exist: no worker is running with --health-file {path}"
    except OSError as exc:
        return f"cannot read {path}: {exc.strerror or exc}"
    if age > max_age:
        return f"{path} was last written {age:.0f} s ago (over {max_age:g} s): the worker is stuck"
    return None

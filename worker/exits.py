"""Leaving a process that used Temporal without passing through interpreter finalization.

temporalio's Rust core keeps threads (its tokio runtime) that take the GIL
to hand results and dropped objects back to Python. When one of them does
so while the interpreter finalizes (after `asyncio.run(...)` returns and the
script ends), CPython makes that thread exit mid-call and the process dies
with `Fatal Python error: PyGILState_Release: thread state ... must be
current when releasing` (SIGABRT, exit code 134) or a segmentation fault
(139): sdk-python issue #300. Measured here with worker scripts stopped by
SIGTERM: `asyncio.run(run_worker(...))` aborted in about 1 run in 10, a bare
`temporalio.worker.Worker` script segfaulted in 2 of 24; the main thread
was in `Py_FinalizeEx`'s garbage collection each time. The core's threads are
not Python's, so nothing can join them first (a 1 s pause after the worker
stopped hid it in 30 runs, which bounds nothing).

So a process ends, once its work is done and drained, with `exit_process`:
stdout, stderr and logging flushed, then `os._exit` with the status, which
skips finalization and cannot abort. The `durable-tools` command always
leaves this way; a script uses `run_and_exit`:

```python
from durable_tools.worker import run_and_exit

async def main() -> None:
    client = await Client.connect("localhost:7233", data_converter=pydantic_data_converter)
    await Conversations(client, task_queue="agents").approve(...)

if __name__ == "__main__":
    run_and_exit(main)
```

`atexit` handlers do not run on this path: flush or close what needs it
(files, exporters) before returning from `main`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import traceback
from collections.abc import Awaitable, Callable
from typing import NoReturn

__all__ = ["exit_process", "run_and_exit"]


def exit_process(code: int) -> NoReturn:
    """Flush stdout, stderr and logging's handlers, then end the process with `code`.

    Args:
        code: The exit status (0 success; 1 failure, 2 bad input, 130
            interrupted, as the `durable-tools` command uses them).
    """
    logging.shutdown()  # flushes and closes every handler
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing left to write
            pass
    os._exit(code)


def run_and_exit(main: Callable[[], Awaitable[object]]) -> NoReturn:
    """`asyncio.run(main())`, then `exit_process` with its status.

    The status: 0 when `main` returns; a `SystemExit`'s code (a string is
    printed to stderr, status 1); 130 on `KeyboardInterrupt`; 1 on any other
    exception, after its traceback on stderr.

    Args:
        main: The script's async entry point (called without arguments).
    """
    code = 0

    async def run() -> None:
        await main()

    try:
        asyncio.run(run())
    except SystemExit as exc:
        if isinstance(exc.code, str):
            sys.stderr.write(f"{exc.code}\n")
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except KeyboardInterrupt:
        code = 130
    except BaseException:  # the traceback a normal exit would print
        traceback.print_exc()
        code = 1
    exit_process(code)

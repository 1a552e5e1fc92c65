"""The worker process's cyclic garbage collector, tuned for serving conversations.

CPython collects its youngest generation after every 700 net new container
objects, its middle one after every 10 of those, and its oldest after 10 of
those once a quarter of it is new (Python 3.11's `gc.get_threshold()`,
`(700, 10, 10)`). A worker serving conversations allocates containers at
a high rate (payloads decoded into models, transcripts, commands), and
every full collection walks every object the process ever imported: the
SDK, pydantic, the `mcp` SDK, OpenTelemetry, the application's toolkits.
At 500 conversations of five tool turns at once on one worker
(`bench/scale.py --sizes 500 --skip-bare`, two runs each, interleaved),
the collector took 5.3 and 5.8 s of the worker's 59 s of CPU with the
defaults (566 young, 51 middle and 8 full collections, the full ones 0.3 s
each); tuned as here, 2.8 and 2.8 s (41, 2 and 5, the full ones 0.2 s),
and the worker's CPU per tool call fell 5% (23.0 and 21.8 ms against
23.6 and 23.8), its peak RSS rose 4% (195 against 188 MB) and its RSS
after the drain stayed the same.

So `durable-tools worker`, once its worker is built and before it polls
(`tune`):

1. collects, then freezes what is left (`gc.freeze()`): what was imported
   and built at startup moves to the permanent generation, which no later
   collection walks;
2. sets the thresholds to `THRESHOLDS`: a young collection after 10,000 net
   new containers (about 40 ms each in the run above, far inside the SDK's
   2 s deadlock detector), fewer middle and full ones.

Objects freed by their reference count (almost all) are freed at once as
before; only cyclic garbage waits longer, for at most 10,000 allocations.
`DURABLE_TOOLS_COLLECTOR=default` (or `--collector default`) keeps the
interpreter's settings, and so does a process that called the CLI in
process (only the console script itself tunes, as `allocator.is_command`
says). A worker run from Python (`run_worker`) is left as the application
set it: call `tune` there, before it serves, to get the same.
"""

from __future__ import annotations

import gc
from typing import Final, Literal

__all__ = [
    "CHOICES",
    "COLLECTOR_ENV",
    "THRESHOLDS",
    "CollectorChoice",
    "describe",
    "tune",
]

COLLECTOR_ENV: Final = "DURABLE_TOOLS_COLLECTOR"
"""The environment variable choosing the collector's settings: `tuned` (default) or `default`."""

CollectorChoice = Literal["tuned", "default"]
CHOICES: Final[tuple[CollectorChoice, ...]] = ("tuned", "default")

THRESHOLDS: Final = (7_000, 10, 1)
"""`gc.set_threshold` of a tuned worker (see the module for the measurements)."""


def tune(choice: CollectorChoice = "tuned") -> str:
    """Collect, freeze what is left and raise the thresholds (`THRESHOLDS`); or nothing.

    Call it once the worker is built and before it serves: what exists then
    is never walked again by a collection.

    Args:
        choice: `tuned` (default) does the above; `default` changes nothing.

    Returns:
        One line for the worker's startup line (`describe`).
    """
    if choice == "tuned":
        gc.collect()
        gc.freeze()
        gc.set_threshold(*THRESHOLDS)
    return describe()


def describe() -> str:
    """The collector's settings for a startup line.

    E.g. `garbage collector thresholds 7000/10/1, 86,969 startup objects
    frozen`, or `garbage collector thresholds 700/10/10` when untouched.
    """
    line = "garbage collector thresholds " + "/".join(str(t) for t in gc.get_threshold())
    frozen = gc.get_freeze_count()
    if frozen:
        line += f", {frozen:,} startup objects frozen"
    return line

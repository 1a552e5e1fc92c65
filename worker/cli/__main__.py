"""`python -m durable_tools.worker.cli`: the `durable-tools` command."""

from __future__ import annotations

from durable_tools.worker import allocator
from durable_tools.worker.cli import app

allocator.as_command()  # `worker` may start this process again on jemalloc
app()

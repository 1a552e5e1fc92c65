"""`python -m durable_tools.worker.cli`: the `durable-tools` command."""

from __future__ import annotations

from durable_tools.worker.cli import app

app()

"""The durable-tools worker: plugin, runner, CLI and the embedded dev server."""

from __future__ import annotations

from worker.plugin import PASSTHROUGH_MODULES, DurableToolsPlugin, sandbox_runner

__all__ = ["PASSTHROUGH_MODULES", "DurableToolsPlugin", "sandbox_runner"]

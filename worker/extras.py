"""Which optional extra each feature of the `durable-tools` command needs, checked before use.

A command whose extra is missing stops with one line naming it (the
`MissingExtra` message, exit code 2) instead of a `ModuleNotFoundError`.
`EXTRA_MODULES` holds the extras checked here, by the modules they bring:
`cli` (every command), `inbox` (`inbox`, `codec-server`, and the inbox of
`dev`, which then starts without it), `otel` (a worker with
`OTEL_EXPORTER_OTLP_ENDPOINT`). The others are checked where they are used:
`dev-server` by `durable_tools.worker.dev_server.find_temporal_cli` (`dev`,
`dev-server`), `s3` by `durable_tools.storage` (`--storage-s3-bucket`),
`test-model` by the `test` model.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping

from durable_tools.errors import MissingExtra

__all__ = ["EXTRA_MODULES", "missing_extra", "require_extra"]

EXTRA_MODULES: Mapping[str, tuple[str, ...]] = {
    "cli": ("typer", "rich"),
    "inbox": ("fastapi", "jinja2", "uvicorn", "multipart"),
    "otel": ("opentelemetry.exporter.otlp.proto.http",),
}
"""Modules whose absence means the extra is not installed (its own packages, by import name)."""


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package of a dotted name is missing
        return False


def missing_extra(feature: str, extra: str) -> MissingExtra | None:
    """The `MissingExtra` for `feature` if any module of `extra` is not installed, else `None`.

    Args:
        feature: What needs it, as the message starts ("durable-tools inbox").
        extra: A key of `EXTRA_MODULES`.
    """
    if all(_installed(module) for module in EXTRA_MODULES[extra]):
        return None
    return MissingExtra(feature, extra)


def require_extra(feature: str, extra: str) -> None:
    """Raise `missing_extra(feature, extra)` if there is one.

    Raises:
        MissingExtra: A module of `extra` is not installed.
    """
    missing = missing_extra(feature, extra)
    if missing is not None:
        raise missing

"""Agent settings as request body fields, shared by the SDK adapters.

`AgentConfig.settings` (and an adapter's default `settings`) are JSON values
sent as fields of the request body. A few provider-neutral names are renamed
per API (`max_tokens` → `max_output_tokens` for Responses, ...); the fields
the adapter renders itself (`model`, the transcript, `tools`) cannot be set
this way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from durable_tools.errors import ConfigurationError

__all__ = ["merge_settings", "rename"]


def merge_settings(
    defaults: Mapping[str, Any],
    overrides: Mapping[str, Any],
    *,
    reserved: Iterable[str],
    adapter: str,
) -> dict[str, Any]:
    """Merge an adapter's default settings with a request's settings.

    Args:
        defaults: The adapter's `settings`.
        overrides: `ModelRequest.settings` (from `AgentConfig.settings`); they
            win over `defaults`, key by key.
        reserved: Body fields the adapter renders itself.
        adapter: The adapter's class name, for the error message.

    Returns:
        A new dict.

    Raises:
        ConfigurationError: A setting names a reserved field. Inside the
            `model.turn` activity this fails the turn without retries
            (`ConfigurationError` is a non-retryable error type).
    """
    merged = {**defaults, **overrides}
    clashes = sorted(set(merged) & set(reserved))
    if clashes:
        raise ConfigurationError(
            f"{adapter}: settings {clashes} are set by the adapter itself "
            "(the model name, the transcript and the toolkit's tools; streaming is not "
            "supported); remove them from the settings"
        )
    return merged


def rename(settings: dict[str, Any], old: str, new: str) -> None:
    """Rename setting `old` to `new` in place, unless `new` is set as well."""
    if old in settings and new not in settings:
        settings[new] = settings.pop(old)

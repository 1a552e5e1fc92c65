"""Agent settings as request body fields, shared by the SDK adapters.

`AgentConfig.settings` (and an adapter's default `settings`) are JSON values
sent as fields of the request body. A few provider-neutral names are renamed
per API (`max_tokens` → `max_output_tokens` for Responses, ...); the fields
the adapter renders itself (`model`, the transcript, `tools`) cannot be set
this way.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from durable_tools.errors import ConfigurationError

__all__ = ["RENDERED_FIELDS", "check_settings", "merge_settings", "parse_setting", "rename"]

RENDERED_FIELDS: frozenset[str] = frozenset(
    {"model", "messages", "input", "instructions", "system", "tools", "stream"}
)
"""Body fields one SDK adapter or another renders itself (the union of their
reserved names): settings a caller passes when starting a conversation may
not name them, whatever model the worker resolves."""


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


def check_settings(settings: Mapping[str, Any], *, where: str = "settings") -> dict[str, Any]:
    """Check settings a caller gives for a conversation; return them as a dict.

    Args:
        settings: Setting names to JSON values (`{"temperature": 0.2}`).
        where: What to call them in the message (`"--setting"`).

    Returns:
        A new dict.

    Raises:
        ConfigurationError: A name is empty or one of `RENDERED_FIELDS`, or
            a value is not JSON (it must travel in workflow history).
    """
    checked = dict(settings)
    bad = sorted(name for name in checked if not name or name in RENDERED_FIELDS)
    if bad:
        raise ConfigurationError(
            f"{where}: {bad} cannot be set: the model adapter renders "
            f"{sorted(RENDERED_FIELDS)} itself (use AgentConfig.model, instructions, the toolkit)"
        )
    try:
        json.dumps(checked, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"{where}: values must be JSON ({exc})") from None
    return checked


def parse_setting(text: str) -> tuple[str, Any]:
    """Parse `key=value` (a command line's `--setting`): the value as JSON, else a string.

    `temperature=0.2` gives `0.2`, `stop=["END"]` a list, `seed=7` an int,
    `reasoning_effort=low` the string `"low"` (not JSON), `name="7"` the
    string `"7"`.

    Raises:
        ConfigurationError: No `=`, or nothing before it.
    """
    name, sep, raw = text.partition("=")
    name = name.strip()
    if not sep or not name:
        raise ConfigurationError(
            f"--setting {text!r}: use key=value, e.g. --setting temperature=0.2"
        )
    try:
        value: Any = json.loads(raw)
    except ValueError:
        value = raw
    return name, value

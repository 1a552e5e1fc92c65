"""The `verify_decision` local activity: decision signatures checked on the worker.

The keys live on the worker (`App(decision_keys=...)`, `DurableToolsPlugin(decision_keys=...)`
or `DURABLE_TOOLS_DECISION_KEYS`), never in workflow history. The workflow
calls this as a local activity, so its verdict is recorded (a marker in
history) and a replay reads the recorded verdict instead of checking again:
rotating keys never changes the outcome of a decision already received.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Mapping
from typing import Final

from temporalio import activity

from durable_tools._wire import VERIFY_DECISION_ACTIVITY
from durable_tools.approvals import DecisionCheck, DecisionVerdict, verify_signature
from durable_tools.errors import ConfigurationError

__all__ = [
    "DECISION_KEYS_ENV",
    "VERIFY_DECISION_ACTIVITY",
    "DecisionVerifier",
    "decision_keys_from_environment",
]


DECISION_KEYS_ENV: Final[str] = "DURABLE_TOOLS_DECISION_KEYS"
"""Environment variable with the worker's decision keys: `k1:BASE64,k2:BASE64`."""


def decision_keys_from_environment(
    environ: Mapping[str, str] | None = None,
) -> dict[str, bytes]:
    """The decision keys named by `DURABLE_TOOLS_DECISION_KEYS`.

    Args:
        environ: The environment (default `os.environ`).

    Returns:
        Keys by key id; empty when the variable is unset.

    Raises:
        ConfigurationError: An entry is not `KEY_ID:BASE64`.
    """
    text = (os.environ if environ is None else environ).get(DECISION_KEYS_ENV, "")
    keys: dict[str, bytes] = {}
    for entry in filter(None, (part.strip() for part in text.split(","))):
        key_id, sep, encoded = entry.partition(":")
        try:
            key = base64.b64decode(encoded, validate=True) if sep and key_id else b""
        except binascii.Error:
            key = b""
        if not key:
            raise ConfigurationError(
                f"{DECISION_KEYS_ENV}: entry {key_id[:40]!r}… is not KEY_ID:BASE64 "
                "(e.g. k1:$(head -c 32 /dev/urandom | base64))"
            )
        keys[key_id] = key
    return keys


class DecisionVerifier:
    """Holds the worker's decision keys and checks signatures with them.

    Args:
        keys: Keys by key id; several at once during a rotation.
    """

    def __init__(self, keys: Mapping[str, bytes]) -> None:
        self.keys = dict(keys)

    @activity.defn(name=VERIFY_DECISION_ACTIVITY)
    async def verify_decision(self, check: DecisionCheck) -> DecisionVerdict:
        """Verify one decision's signature; never raises for a bad one."""
        problem = verify_signature(check.decision, check.workflow_id, self.keys)
        return DecisionVerdict(valid=problem is None, reason=problem or "")

"""The `verify_decision` local activity: decision signatures checked on the worker.

The keys live on the worker (`App(decision_keys=...)`, `DurableToolsPlugin(decision_keys=...)`
or `DURABLE_TOOLS_DECISION_KEYS`), never in workflow history. The workflow
calls this as a local activity, so its verdict is recorded (a marker in
history) and a replay reads the recorded verdict instead of checking again:
rotating keys never changes the outcome of a decision already received.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Final

from temporalio import activity

from durable_tools._wire import VERIFY_DECISION_ACTIVITY
from durable_tools.approvals import DecisionCheck, DecisionVerdict, verify_signature
from durable_tools.decision_keys import VerifyingKey, check_verifying_keys, parse_verifying_keys

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
) -> dict[str, VerifyingKey]:
    """The decision keys named by `DURABLE_TOOLS_DECISION_KEYS`.

    Args:
        environ: The environment (default `os.environ`).

    Returns:
        Keys by key id (HMAC secrets, Ed25519 public keys); empty when the
        variable is unset.

    Raises:
        ConfigurationError: An entry is not `KEY_ID:BASE64` (an HMAC secret
            of at least 32 bytes) or `KEY_ID:ed25519:BASE64` (a public key);
            see `durable_tools.decision_keys.parse_verifying_keys`.
    """
    text = (os.environ if environ is None else environ).get(DECISION_KEYS_ENV, "")
    return parse_verifying_keys(text, source=DECISION_KEYS_ENV)


class DecisionVerifier:
    """Holds the worker's decision keys and checks signatures with them.

    Args:
        keys: Keys by key id (HMAC secrets of 32 bytes or more, Ed25519
            public keys); several at once during a rotation.

    Raises:
        ConfigurationError: A key that is neither (`check_verifying_keys`).
    """

    def __init__(self, keys: Mapping[str, VerifyingKey]) -> None:
        self.keys = check_verifying_keys(keys, source="decision_keys")

    @activity.defn(name=VERIFY_DECISION_ACTIVITY)
    async def verify_decision(self, check: DecisionCheck) -> DecisionVerdict:
        """Verify one decision's signature; never raises for a bad one."""
        problem = verify_signature(check.decision, check.workflow_id, self.keys)
        return DecisionVerdict(valid=problem is None, reason=problem or "")

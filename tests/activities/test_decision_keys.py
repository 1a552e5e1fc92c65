"""The worker's decision keys: from the environment, never malformed silently."""

from __future__ import annotations

import base64

import pytest

from durable_tools.activities.decision_activities import (
    DECISION_KEYS_ENV,
    DecisionVerifier,
    decision_keys_from_environment,
)
from durable_tools.approvals import DecisionCheck, sign_decision
from durable_tools.errors import ConfigurationError
from durable_tools.worker.plugin import DurableToolsPlugin

K1, K2 = b"a" * 32, b"b" * 32


def _b64(key: bytes) -> str:
    return base64.b64encode(key).decode()


def test_keys_are_read_by_id_from_the_environment() -> None:
    text = f"k1:{_b64(K1)}, k2:{_b64(K2)}"
    assert decision_keys_from_environment({DECISION_KEYS_ENV: text}) == {"k1": K1, "k2": K2}
    assert decision_keys_from_environment({}) == {}


@pytest.mark.parametrize("text", ["k1", "k1:", ":" + _b64(K1), "k1:not base64!"])
def test_a_malformed_entry_is_a_configuration_error(text: str) -> None:
    with pytest.raises(ConfigurationError, match=DECISION_KEYS_ENV):
        decision_keys_from_environment({DECISION_KEYS_ENV: text})


async def test_the_plugin_verifies_with_the_keys_it_was_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    decision = sign_decision(
        "k2", K2, workflow_id="wf", call_id="c1", arguments_hash="d", approved=True, decided_by="a"
    )
    check = DecisionCheck(workflow_id="wf", decision=decision)
    assert (await DecisionVerifier({"k1": K1, "k2": K2}).verify_decision(check)).valid
    monkeypatch.setenv(DECISION_KEYS_ENV, f"k2:{_b64(K2)}")
    from_env = DurableToolsPlugin(toolkits={}, models={})
    assert (await from_env.verifier.verify_decision(check)).valid
    given = DurableToolsPlugin(toolkits={}, models={}, decision_keys={"k1": K1})
    verdict = await given.verifier.verify_decision(check)
    assert not verdict.valid and "unknown key id 'k2'" in verdict.reason

"""The worker's decision keys: from the environment, never malformed silently."""

from __future__ import annotations

import base64

import pytest

from durable_tools.activities.decision_activities import (
    DECISION_KEYS_ENV,
    DecisionVerifier,
    decision_keys_from_environment,
)
from durable_tools.approvals import DecisionCheck, sign_decision, verify_signature
from durable_tools.decision_keys import generate_ed25519_entries, parse_signing_key
from durable_tools.errors import ConfigurationError
from durable_tools.worker import App
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
        "k2",
        K2,
        workflow_id="wf",
        instance="run@2026-11-26T10:00:00.000000+00:00",
        call_id="c1",
        arguments_hash="d",
        approved=True,
        decided_by="a",
    )
    check = DecisionCheck(workflow_id="wf", decision=decision)
    assert (await DecisionVerifier({"k1": K1, "k2": K2}).verify_decision(check)).valid
    monkeypatch.setenv(DECISION_KEYS_ENV, f"k2:{_b64(K2)}")
    from_env = DurableToolsPlugin(toolkits={}, models={})
    assert (await from_env.verifier.verify_decision(check)).valid
    given = DurableToolsPlugin(toolkits={}, models={}, decision_keys={"k1": K1})
    verdict = await given.verifier.verify_decision(check)
    assert not verdict.valid and "unknown key id 'k2'" in verdict.reason


# Issue 23, item 5: no short HMAC keys; Ed25519 so that workers hold public keys only.


@pytest.mark.parametrize("length", [1, 16, 31])
def test_a_short_hmac_key_is_refused_everywhere(length: int) -> None:
    short = b"k" * length
    with pytest.raises(ConfigurationError, match=f"has {length} bytes"):
        decision_keys_from_environment({DECISION_KEYS_ENV: f"k1:{_b64(short)}"})
    with pytest.raises(ConfigurationError, match=f"has {length} bytes"):
        App(decision_keys={"k1": short})
    with pytest.raises(ConfigurationError, match=f"has {length} bytes"):
        parse_signing_key(f"k1:{_b64(short)}", source="test")
    with pytest.raises(ConfigurationError, match=f"has {length} bytes"):
        sign_decision(
            "k1",
            short,
            workflow_id="wf",
            instance="i",
            call_id="c1",
            arguments_hash="d",
            approved=True,
            decided_by="a",
        )


def test_ed25519_the_inbox_signs_and_workers_verify_with_the_public_key_only() -> None:
    signing_entry, verifying_entry = generate_ed25519_entries("ed1")
    signing = parse_signing_key(signing_entry, source="test")
    assert signing is not None and signing[0] == "ed1"
    keys = decision_keys_from_environment({DECISION_KEYS_ENV: f"{verifying_entry},k1:{_b64(K1)}"})
    assert set(keys) == {"ed1", "k1"} and not isinstance(keys["ed1"], bytes)
    decision = sign_decision(
        "ed1",
        signing[1],
        workflow_id="wf",
        instance="run@2026-11-26T10:00:00.000000+00:00",
        call_id="c1",
        arguments_hash="d",
        approved=True,
        decided_by="ana",
        groups=["finance"],
    )
    assert verify_signature(decision, "wf", keys) is None
    for tampered in (
        decision.model_copy(update={"groups": ["finance", "admin"]}),
        decision.model_copy(update={"signature": "AAAA"}),
        decision.model_copy(update={"signature": "not base64!"}),
    ):
        assert "invalid signature" in (verify_signature(tampered, "wf", keys) or "")
    # The same key id with an HMAC secret on the worker does not verify it either.
    assert verify_signature(decision, "wf", {"ed1": K1}) is not None

    # A worker never takes the private key, and a public key cannot sign.
    with pytest.raises(ConfigurationError, match="public key only"):
        decision_keys_from_environment({DECISION_KEYS_ENV: signing_entry})
    with pytest.raises(ConfigurationError, match="public key only"):
        App(decision_keys={"ed1": signing[1]})
    with pytest.raises(ConfigurationError, match="cannot sign"):
        parse_signing_key(verifying_entry, source="test")
    with pytest.raises(ConfigurationError, match="not 32"):
        decision_keys_from_environment({DECISION_KEYS_ENV: f"ed2:ed25519:{_b64(b'x' * 31)}"})


def test_keygen_prints_a_pair_the_inbox_and_the_workers_read() -> None:
    from typer.testing import CliRunner

    from durable_tools.worker.cli import app

    runner = CliRunner()
    for args in (["keygen", "--key-id", "ed1"], ["keygen", "--key-id", "h1", "--hmac"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        inbox_line, workers_line = result.output.splitlines()
        signing = parse_signing_key(inbox_line.rpartition(" ")[2], source="inbox")
        keys = decision_keys_from_environment({DECISION_KEYS_ENV: workers_line.rpartition(" ")[2]})
        assert signing is not None and set(keys) == {signing[0]}
        decision = sign_decision(
            signing[0],
            signing[1],
            workflow_id="wf",
            instance="i",
            call_id="c1",
            arguments_hash="d",
            approved=True,
            decided_by="a",
        )
        assert verify_signature(decision, "wf", keys) is None
    bad = runner.invoke(app, ["keygen", "--key-id", "a:b"])
    assert bad.exit_code == 2 and "--key-id" in bad.output

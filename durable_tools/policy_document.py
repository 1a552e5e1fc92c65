"""An approval policy as data: its rules, its canonical text and version, a live change.

No CEL here (`durable_tools.policies` compiles and evaluates rules, on the
worker): this module is what the workflow, clients and the CLI need of a
policy without the `policy` extra. The workflow validates a
`PolicyChange` (the `set_policy` signal, docs/policies.md "Live change")
and computes its version here, deterministically (RFC 8785 JSON and
SHA-256 of pure data) and keeps the `InstalledPolicy`; the activities that
evaluate it get a `PolicyRef` (name and version), and the worker loads the
document by version (`activities/policy_versions.py`), checking its digest.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any, Self

import rfc8785
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from durable_tools.errors import ConfigurationError
from durable_tools.escalation import Escalation
from durable_tools.policy_verdict import PolicyOutcome

__all__ = [
    "MAX_DOCUMENT_BYTES",
    "InstalledPolicy",
    "PolicyChange",
    "PolicyDocument",
    "PolicyRef",
    "Rule",
    "canonical_text",
    "change_problem",
    "document_version",
]

MAX_DOCUMENT_BYTES = 64 * 1024
"""Bytes of a policy's canonical text a live change may carry (it is recorded in
history with the signal and carried across continue-as-new; activities get
its version only)."""


class Rule(BaseModel):
    """One rule of a policy.

    Attributes:
        id: The rule's id, recorded with every verdict it gives (e.g.
            `refund-large`); unique within its policy.
        when: A CEL condition over the inputs (`PolicyInput`); must give a
            bool. At most 4,000 characters (it is recorded with each verdict).
        outcome: `run`, `approve` or `deny`.
        groups: For `approve`: who may approve. `finance` means
            `group:finance`; `user:ana` is one person. Default none: the
            tool's own approvers (`@tool(approvers=...)`), else anyone.
        quorum: For `approve`: distinct approvers needed (default 1). The
            same person approving twice counts once.
        reason: Shown to approvers; for `deny`, the model reads it (at most
            1,000 characters).
        remind_after: For `approve`: a reminder while the call still waits,
            this long after it started (seconds, or `30m`, `4h`, `2d`).
        escalate_after: For `approve`: escalate the call this long after it
            started waiting (with `escalate_to`).
        escalate_to: Who may decide once escalated (`oncall` means
            `group:oncall`); they replace the approvers.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1, max_length=100)
    when: str = Field(min_length=1, max_length=4000)
    outcome: PolicyOutcome
    groups: tuple[str, ...] = ()
    quorum: int = Field(default=1, ge=1, le=100)
    reason: str = Field(default="", max_length=1000)
    remind_after: float | str | None = None
    escalate_after: float | str | None = None
    escalate_to: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _escalation_checked(self) -> Rule:
        self.escalation()  # raises ValueError for a bad duration or an unpaired field
        return self

    def approvers(self) -> list[str]:
        """`groups` as approver names (`finance` → `group:finance`)."""
        return [g if ":" in g else f"group:{g}" for g in self.groups]

    def escalation(self) -> Escalation | None:
        """The rule's reminder and escalation (`None`: neither)."""
        if self.remind_after is None and self.escalate_after is None and not self.escalate_to:
            return None
        return Escalation.model_validate(
            {
                "remind_after": self.remind_after,
                "escalate_after": self.escalate_after,
                "escalate_to": list(self.escalate_to),
            }
        )


class PolicyDocument(BaseModel):
    """A policy's text as data: `name`, `rules` (in order), `default`.

    Validating one checks what needs no CEL: field shapes and bounds, unique
    rule ids, and that a quorum has groups.

    Attributes:
        name: The policy's name (recorded with each verdict).
        rules: The rules, in order (at most 500).
        default: The outcome when no rule matches (`None`: the next policy).
    """

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=100)
    rules: list[Rule] = Field(max_length=500)
    default: PolicyOutcome | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        ids = [rule.id for rule in self.rules]
        duplicate = next((i for i in ids if ids.count(i) > 1), None)
        if duplicate is not None:
            raise ValueError(f"two rules have the id {duplicate!r}")
        for rule in self.rules:
            if rule.quorum > 1 and not rule.groups:
                raise ValueError(
                    f"rule {rule.id!r}: a quorum needs groups (who the distinct approvers are)"
                )
        return self

    @classmethod
    def from_text(cls, text: str) -> PolicyDocument:
        """A document from YAML or JSON text (no CEL needed; rules are not compiled).

        Raises:
            ConfigurationError: The text is not YAML/JSON of that shape.
        """
        import yaml

        try:
            return cls.model_validate(yaml.safe_load(text))
        except (yaml.YAMLError, ValidationError, RecursionError) as exc:
            raise ConfigurationError(f"invalid policy text: {exc}") from None


def canonical_text(document: PolicyDocument) -> str:
    """The RFC 8785 JSON text of a policy: what its version digests."""
    data: Any = document.model_dump(mode="json")
    for rule in data["rules"]:
        for name in _ESCALATION_FIELDS:  # absent when unset: older versions stay the same
            if rule.get(name) in (None, []):
                rule.pop(name, None)
    return rfc8785.dumps(data).decode()


_ESCALATION_FIELDS = ("remind_after", "escalate_after", "escalate_to")


def document_version(document: PolicyDocument) -> str:
    """`sha256:` and the hex SHA-256 of the canonical text (equals `Policy.version`)."""
    return "sha256:" + hashlib.sha256(canonical_text(document).encode()).hexdigest()


class PolicyChange(BaseModel):
    """The `set_policy` signal's input: install a policy version in a conversation.

    Attributes:
        document: The policy.
        version: The version the sender computed (`document_version`); when
            given, the workflow refuses a change whose document digests to
            another (default `""`: the workflow's digest is the version).
        installed_by: Who installs it (the inbox sends the signed-in
            identity; recorded with the change).
        reason: Why (shown with the change; at most 500 characters).
    """

    model_config = ConfigDict(extra="forbid")

    document: PolicyDocument
    version: str = Field(default="", max_length=100)
    installed_by: str = Field(default="", max_length=200)
    reason: str = Field(default="", max_length=500)


def change_problem(change: PolicyChange) -> tuple[str | None, str]:
    """Why a decoded change cannot be installed (`None`: it can), and its version.

    From the payload alone, the same on every replay: the document's
    canonical text must fit in `MAX_DOCUMENT_BYTES`, and a claimed
    `version` must be the document's digest. Never raises.
    """
    try:
        text = canonical_text(change.document)
    except Exception as exc:  # e.g. text that does not encode; decoding checks it first
        return f"the document has no canonical text: {type(exc).__name__}", ""
    size = len(text.encode())
    if size > MAX_DOCUMENT_BYTES:
        return f"the policy is {size:,} bytes; at most {MAX_DOCUMENT_BYTES:,}", ""
    version = "sha256:" + hashlib.sha256(text.encode()).hexdigest()
    if change.version and change.version != version:
        return (
            f"the claimed version {change.version[:80]!r} is not the document's digest {version!r}",
            "",
        )
    return None, version


class InstalledPolicy(BaseModel):
    """A policy version installed in a conversation by a live change.

    It takes the agent's own policy's place (`Agent.policy`) for every call
    planned after it, and for calls waiting for approval when it arrived.

    Attributes:
        document: The policy.
        version: Its version (`document_version`).
        installed_by: Who installed it (cleaned).
        installed_at: When the workflow took it (its clock).
    """

    document: PolicyDocument
    version: str
    installed_by: str = ""
    installed_at: datetime

    def ref(self) -> PolicyRef:
        """What an activity is sent instead of the document: name, version, who and when."""
        return PolicyRef(
            name=self.document.name,
            version=self.version,
            installed_by=self.installed_by,
            installed_at=self.installed_at,
        )


class PolicyRef(BaseModel):
    """A policy version installed in a conversation, named by its digest (no rules).

    What the `model.turn` and `policy.reevaluate-v1` activities are sent
    (`ModelTurnRequest.policy_ref`, `Reevaluation.policy_ref`): history
    holds the document once, with the `set_policy` signal (and in a
    continue-as-new's carried state). The worker loads the document by
    `version` and refuses one whose digest is another
    (`activities/policy_versions.py`).

    Attributes:
        name: The policy's name (recorded with a fail-closed verdict when
            the version cannot be loaded).
        version: The document's digest (`document_version`).
        installed_by: Who installed it.
        installed_at: When the workflow took it.
    """

    name: str
    version: str
    installed_by: str = ""
    installed_at: datetime | None = None

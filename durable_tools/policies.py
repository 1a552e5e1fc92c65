"""Approval policies as code: CEL rules over a tool call, decided on the worker.

A `Policy` is an ordered list of `Rule`s. Each rule has an id, a condition
in CEL (the Common Expression Language, <https://cel.dev>; evaluated by the
`common-expression-language` package, docs/policies.md says why) and an
outcome: `run`, `approve` (by which groups, how many distinct approvers) or
`deny` (with a reason the model reads). The first rule whose condition is
true decides; when none is, the policy's `default` decides, or (default
`None`) the next policy does, and after the last the tool's own
`needs_approval`.

Where policies come from: `Agent(policy=...)` first, then
`App(policies={"<toolkit>": ..., "mcp:<server>": ...})` (a toolkit's
defaults, an MCP server's defaults for its tools). They are evaluated when a
model turn's calls are planned (`activities/planning.py`, inside the
`model.turn` activity), and the verdict (`PolicyVerdict`: policy name,
version, rule, outcome) is recorded in history with the plan. The workflow
only reads it, so a replay on a worker with another policy version gives
the same verdicts: the recorded version decides.

What a rule sees (`PolicyInput`, CEL variables; docs/policies.md has the
table): `tool` (string), `args` (the arguments as a JSON map), `annotations`
(the tool's annotations when trusted, else `{}`), `conversation` (`team`,
`agent`, `caller`, `workflow_id`) and `history` (`calls` and `ran`: tool name
to the calls made, and answered `Ok`, earlier in this conversation;
`tool_calls` and `tool_ran`: the same for this tool).

A rule that fails to compile, raises (a missing key, a type mismatch, a
value CEL cannot hold) or gives a non-bool fails closed: the call needs
approval (the rule's groups, else the tool's approvers) and the verdict
records the error.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from pydantic import ValidationError

from durable_tools.errors import ConfigurationError, MissingExtra
from durable_tools.handler_input import clean_text
from durable_tools.policy_document import (
    PolicyDocument,
    Rule,
    canonical_text,
    document_version,
)
from durable_tools.policy_verdict import PolicyOutcome, PolicyVerdict

__all__ = [
    "MAX_ERROR_CHARS",
    "Policy",
    "PolicyDocument",
    "PolicyInput",
    "PolicyVerdict",
    "Rule",
    "decide",
    "json_arguments",
]

MAX_ERROR_CHARS = 300
"""Characters of an evaluation error kept in a verdict."""

_FATAL = (KeyboardInterrupt, SystemExit, GeneratorExit)


@dataclass(frozen=True, kw_only=True)
class PolicyInput:
    """What a rule sees of one call (each field is a CEL variable, see the module docstring).

    Attributes:
        tool: The tool name.
        args: The call's arguments as decoded JSON (`{}` if not an object).
        annotations: Trusted annotations, or `{}`.
        conversation: `team`, `agent`, `caller`, `workflow_id`.
        history: `calls`, `ran`, `tool_calls`, `tool_ran`.
    """

    tool: str
    args: Mapping[str, Any] = field(default_factory=dict[str, Any])
    annotations: Mapping[str, Any] = field(default_factory=dict[str, Any])
    conversation: Mapping[str, Any] = field(default_factory=dict[str, Any])
    history: Mapping[str, Any] = field(default_factory=dict[str, Any])

    def variables(self) -> dict[str, Any]:
        """The CEL variables."""
        return {
            "tool": self.tool,
            "args": dict(self.args),
            "annotations": dict(self.annotations),
            "conversation": dict(self.conversation),
            "history": dict(self.history),
        }


class Policy:
    """An ordered list of CEL rules; the first true one decides.

    Args:
        name: The policy's name (recorded with each verdict).
        rules: The rules, in order.
        default: The outcome when no rule matches (default `None`: the next
            policy decides, else the tool's own `needs_approval`).
        check: Compile every rule now and raise for one that does not
            compile (default True). `False` keeps such a rule, which then
            fails closed (approval) whenever it is reached.

    Raises:
        ConfigurationError: Two rules share an id, an `approve` rule has
            a quorum but no groups, or (with `check`) a rule does not compile.

    Example:
        ```python
        refunds = Policy.from_text('''
        name: refunds
        rules:
          - {id: refund-never, when: 'tool == "refund" && args.amount_cents > 1000000',
             outcome: deny, reason: 'refunds above 10,000 EUR are never made by the agent'}
          - {id: refund-two, when: 'tool == "refund" && args.amount_cents > 100000',
             outcome: approve, groups: [finance], quorum: 2}
          - {id: refund-large, when: 'tool == "refund" && args.amount_cents > 5000',
             outcome: approve, groups: [finance]}
          - {id: refund-small, when: 'tool == "refund"', outcome: run}
        ''')
        ```
    """

    def __init__(
        self,
        name: str,
        rules: Sequence[Rule],
        *,
        default: PolicyOutcome | None = None,
        check: bool = True,
    ) -> None:
        try:
            parsed = PolicyDocument(name=name, rules=list(rules), default=default)
        except ValidationError as exc:
            raise ConfigurationError(f"invalid policy {name!r}: {_problems(exc)}") from None
        self.document = parsed
        self.name = parsed.name
        self.rules: tuple[Rule, ...] = tuple(parsed.rules)
        self.default: PolicyOutcome | None = parsed.default
        self.text = canonical_text(parsed)
        self.version = document_version(parsed)
        self._programs: dict[str, Any] = {}
        self._errors: dict[str, str] = {}
        for rule in self.rules:
            try:
                self._programs[rule.id] = _compile(rule.when)
            except BaseException as exc:
                if isinstance(exc, (*_FATAL, MissingExtra)):  # not the rule's fault
                    raise
                problem = _error(f"rule {rule.id!r} does not compile", exc)
                if check:
                    raise ConfigurationError(f"policy {name!r}: {problem}") from None
                self._errors[rule.id] = problem

    @classmethod
    def from_text(cls, text: str, *, check: bool = True) -> Policy:
        """A policy from YAML or JSON text: `name`, `rules` (list of `Rule`), `default`.

        Raises:
            ConfigurationError: The text is not YAML/JSON of that shape, or
                the policy is invalid (see `Policy`).
        """
        return cls.from_document(PolicyDocument.from_text(text), check=check)

    @classmethod
    def from_document(cls, document: PolicyDocument, *, check: bool = True) -> Policy:
        """A policy from its document (`durable_tools.policy_document`); see `Policy`."""
        return cls(document.name, document.rules, default=document.default, check=check)

    def __repr__(self) -> str:
        return f"Policy({self.name!r}, {len(self.rules)} rules, {self.version[:19]})"

    def decide(
        self, facts: PolicyInput, *, tool_approvers: Sequence[str] = ()
    ) -> PolicyVerdict | None:
        """The verdict of the first rule that matches `facts`; never raises.

        Args:
            facts: What the rules see.
            tool_approvers: The tool's own approvers, for an `approve` without groups.

        Returns:
            The verdict, or `None` when no rule matched and there is no
            `default`. A rule that fails to evaluate gives an `approve`
            verdict with `error` set (fail closed).
        """
        variables: dict[str, Any] | None = None
        for rule in self.rules:
            problem = self._errors.get(rule.id)
            matched = False
            if problem is None:
                try:
                    if variables is None:
                        variables = facts.variables()
                    result = self._programs[rule.id].execute(variables)
                    if isinstance(result, bool):
                        matched = result
                    else:
                        problem = f"rule {rule.id!r} gave {type(result).__name__}, not a bool"
                except BaseException as exc:
                    if isinstance(exc, _FATAL):
                        raise
                    problem = _error(f"rule {rule.id!r} could not be evaluated", exc)
            if problem is not None:
                approvers = rule.approvers() or list(tool_approvers)
                return self._verdict(rule, "approve", approvers, quorum=1, error=problem)
            if matched:
                approvers = rule.approvers() or list(tool_approvers)
                return self._verdict(rule, rule.outcome, approvers, quorum=rule.quorum)
        if self.default is None:
            return None
        return PolicyVerdict(
            policy=self.name,
            version=self.version,
            outcome=self.default,
            approvers=list(tool_approvers) if self.default == "approve" else [],
        )

    def _verdict(
        self,
        rule: Rule,
        outcome: PolicyOutcome,
        approvers: list[str],
        *,
        quorum: int,
        error: str = "",
    ) -> PolicyVerdict:
        return PolicyVerdict(
            policy=self.name,
            version=self.version,
            rule=rule.id,
            when=rule.when,
            outcome=outcome,
            approvers=approvers if outcome == "approve" else [],
            quorum=quorum if outcome == "approve" else 1,
            reason="" if error else rule.reason,
            error=error,
            escalation=rule.escalation() if outcome == "approve" else None,
        )


def decide(
    policies: Sequence[Policy], facts: PolicyInput, *, tool_approvers: Sequence[str] = ()
) -> PolicyVerdict | None:
    """The verdict of the first policy that decides (`Policy.decide`), or `None`."""
    for policy in policies:
        verdict = policy.decide(facts, tool_approvers=tool_approvers)
        if verdict is not None:
            return verdict
    return None


def _problems(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or '(policy)'}: {e['msg']}" for e in exc.errors()
    )


def _compile(expression: str) -> Any:
    try:
        import cel  # the Rust bindings: imported where policies are evaluated (the worker)
    except ModuleNotFoundError:
        raise MissingExtra("approval policies", "policy") from None
    return cel.compile(expression)


def _error(what: str, exc: BaseException) -> str:
    return clean_text(
        f"{what}: {type(exc).__name__}: {' '.join(str(exc).split())}", MAX_ERROR_CHARS
    )


def json_arguments(arguments: str) -> dict[str, Any]:
    """A call's argument text as the `args` a rule sees (`{}` unless a JSON object)."""
    try:
        value = json.loads(arguments)
    except (ValueError, RecursionError):
        return {}
    if not isinstance(value, dict):
        return {}
    return cast(dict[str, Any], value)

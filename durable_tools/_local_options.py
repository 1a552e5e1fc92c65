"""The options a local tool is built with, shared by `@tool` and `dynamic_tool`.

Private to `durable_tools.constructors`: retry policies, annotations, the
tool's effect (idempotent, at-most-once) and the parameters schema.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from durable_tools.descriptor import ToolAnnotations
from durable_tools.schema import Schema, compile_schema
from durable_tools.tools import (
    EMPTY_PARAMETERS,
    FailureMode,
    NeedsApproval,
    RetryPolicy,
    Tool,
    ToolRun,
)

__all__ = ["LocalOptions", "annotations_of", "parameters_schema", "retry_policy", "tool_effect"]


def retry_policy(retry: RetryPolicy | int | None) -> RetryPolicy | None:
    """`retry=N` as `RetryPolicy(max_attempts=N)`; a policy or `None` as it is."""
    if isinstance(retry, int):
        return RetryPolicy(max_attempts=retry)
    return retry


def tool_effect(
    given: ToolAnnotations | Mapping[str, Any] | None,
    annotations: ToolAnnotations,
    *,
    idempotent: bool | None,
    at_most_once: bool,
    retry: RetryPolicy | None,
) -> dict[str, bool]:
    """The `idempotent` and `at_most_once` fields of a local tool.

    A tool's own annotations are its author's word, so they count: read-only
    or idempotent ones make it idempotent, destructive ones (MCP's reading: not
    read-only and not `destructive=False`) make it at-most-once unless it is
    idempotent or has its own `retry`. Without annotations nothing is declared.
    """
    declared = given is not None
    if idempotent is None:
        idempotent = (
            declared and not at_most_once and (annotations.read_only or annotations.idempotent)
        )
    destructive = declared and annotations.destructive and not annotations.read_only
    once = at_most_once or (destructive and not idempotent and retry is None)
    return {"idempotent": idempotent, "at_most_once": once}


def annotations_of(annotations: ToolAnnotations | Mapping[str, Any] | None) -> ToolAnnotations:
    """A tool's annotations as `ToolAnnotations` (`None`: none declared)."""
    if annotations is None:
        return ToolAnnotations()
    if isinstance(annotations, ToolAnnotations):
        return annotations
    return ToolAnnotations.model_validate(dict(annotations))


def parameters_schema(
    parameters: Mapping[str, Any] | type | None, *, what: str = "schema"
) -> Schema:
    """A tool's parameters schema; `None` is a tool without parameters."""
    spec = parameters if parameters is not None else dict(EMPTY_PARAMETERS)
    return compile_schema(spec, what=what)


@dataclass(frozen=True)
class LocalOptions:
    """What `@tool` and `dynamic_tool` take alike: see their arguments."""

    needs_approval: NeedsApproval
    timeout: float | None
    heartbeat_timeout: float | None
    retry: RetryPolicy | int | None
    annotations: ToolAnnotations | Mapping[str, Any] | None
    strict: bool
    failure_mode: FailureMode
    approval_deadline: float | None
    approvers: Sequence[str]
    idempotent: bool | None
    at_most_once: bool
    local: bool = False

    def tool(
        self,
        *,
        name: str,
        description: str,
        parameters: Schema,
        run: ToolRun,
        output: Schema | None,
        dynamic: bool = False,
    ) -> Tool:
        """The local tool with these options.

        `local=True` (a Temporal local activity, run again when its worker is
        lost) declares the tool idempotent unless `idempotent` says otherwise,
        which `Tool` then refuses.
        """
        hints, policy = annotations_of(self.annotations), retry_policy(self.retry)
        idempotent = True if self.local and self.idempotent is None else self.idempotent
        effect = tool_effect(
            self.annotations,
            hints,
            idempotent=idempotent,
            at_most_once=self.at_most_once,
            retry=policy,
        )
        return Tool(
            name=name,
            description=description,
            parameters=parameters,
            strict=self.strict,
            annotations=hints,
            run=run,
            output=output,
            needs_approval=self.needs_approval,
            timeout=self.timeout,
            heartbeat_timeout=self.heartbeat_timeout,
            retry=policy,
            failure_mode=self.failure_mode,
            approval_deadline=self.approval_deadline,
            approvers=tuple(self.approvers),
            dynamic=dynamic,
            local=self.local,
            **effect,
        )

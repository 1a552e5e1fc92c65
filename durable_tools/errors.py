"""Errors raised to developers by durable-tools.

Anything a *model* sends (unknown tool names, bad JSON, schema violations, tools
that raise or hang) never raises: it becomes a `Failure` value the model sees.
The exceptions here are for *developer* mistakes and are raised at construction
time, with a message that says how to fix the problem.

```
DurableToolsError
├── ConfigurationError            bad tool / toolkit / worker configuration
│   ├── InvalidToolName           name fails ^[a-zA-Z0-9_-]{1,64}$
│   ├── DuplicateToolName         two tools with one name in a toolkit
│   ├── InvalidSchema             a JSON Schema that is not valid draft 2020-12
│   ├── StrictModeError           a schema breaks an OpenAI strict-mode rule
│   └── MissingExtra              a feature whose optional extra is not installed
├── ToolNotFound                  `Toolkit.get` / `with_run` on a missing name
├── DecisionRejected              an approval or answer that fails its checks
├── NoFinalOutput                 a typed result asked of a conversation that did not finish
├── ResumeRejected                `resume_now` on a conversation that is not paused
├── RetryRejected                 `retry_now` on a conversation whose model has not failed
├── StorageError                  an external payload is missing, corrupt or wrongly claimed
└── TranscriptUnavailable         a transcript read that no run of the conversation can answer
```
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ConfigurationError",
    "DecisionRejected",
    "DuplicateToolName",
    "DurableToolsError",
    "InvalidSchema",
    "InvalidToolName",
    "MissingExtra",
    "NoFinalOutput",
    "ResumeRejected",
    "RetryRejected",
    "StorageError",
    "StrictModeError",
    "ToolNotFound",
    "TranscriptUnavailable",
]


class DurableToolsError(Exception):
    """Base class of every exception durable-tools raises on purpose."""


class ConfigurationError(DurableToolsError):
    """A tool, toolkit or worker was configured in a way that cannot work."""


class MissingExtra(ConfigurationError):
    """A feature needs an optional extra of the `durable-tools` distribution.

    The message is one line naming the extra and the command that installs it,
    e.g. "the durable-tools command needs the 'cli' extra: pip install
    'durable-tools[cli]'".

    Attributes:
        extra: The extra's name (`cli`, `dev-server`, `test-model`, `openai`,
            `anthropic`, `s3`).
    """

    def __init__(self, feature: str, extra: str) -> None:
        self.extra = extra
        super().__init__(
            f"{feature} needs the '{extra}' extra: pip install 'durable-tools[{extra}]'"
        )


class InvalidToolName(ConfigurationError):
    """A tool name does not match `^[a-zA-Z0-9_-]{1,64}$`.

    That pattern is the intersection of what OpenAI, Anthropic and Gemini accept
    for function names; a name outside it is rejected by the provider at request
    time, so durable-tools rejects it when the tool is built.
    """


class DuplicateToolName(ConfigurationError):
    """Two tools share one name inside a toolkit.

    Attributes:
        name: The colliding tool name.
        sources: Where each colliding tool came from (toolkit labels), in order.
    """

    def __init__(self, name: str, sources: tuple[str, ...]) -> None:
        self.name = name
        self.sources = sources
        where = " and ".join(repr(s) for s in sources)
        super().__init__(
            f"duplicate tool name {name!r} (from {where}); rename one of the tools or "
            f"namespace a toolkit with Toolkit.namespace(prefix) so it becomes prefix__{name}"
        )


class InvalidSchema(ConfigurationError):
    """A raw JSON Schema given for parameters, output or answers is not valid.

    The schema is checked with `jsonschema.Draft202012Validator.check_schema`.
    """


class StrictModeError(ConfigurationError):
    """A schema breaks a rule of OpenAI's strict mode (structured outputs).

    durable-tools never rewrites a schema silently; the message names the rule
    and the JSON path where it is broken.
    """


class ToolNotFound(DurableToolsError, KeyError):
    """A toolkit lookup by name found no tool."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "tool not found"


class DecisionRejected(DurableToolsError):
    """An approval decision or an interaction answer failed its checks.

    Raised by update validators (unknown call id, second decision, argument hash
    mismatch, answer not matching the answer schema). Signals that fail the same
    checks are recorded as rejected instead of raising.
    """


class NoFinalOutput(DurableToolsError):
    """`Conversations.result(id, output_type=...)` on a conversation that did not `finish`.

    Attributes:
        result: The `ConversationResult` (status `idle_timeout` or
            `turn_limit`, output the last assistant text).
    """

    def __init__(self, result: Any) -> None:
        self.result = result
        status = getattr(result, "status", "?")
        super().__init__(
            f"the conversation ended with status {status!r}, not with the finish tool, "
            "so it has no structured output"
        )


class ResumeRejected(DurableToolsError):
    """`Conversations.resume(..., wait=True)` on a conversation no `pause` call holds.

    The `resume` signal in that state is kept for the conversation's next pause instead.
    """


class RetryRejected(DurableToolsError):
    """`Conversations.retry(..., wait=True)` on a conversation not in state `model_failed`.

    The `retry` signal in that state is ignored instead.
    """


class StorageError(DurableToolsError):
    """An externally stored payload cannot be read (`durable_tools.storage`).

    Its object is missing (a removed directory, another storage directory or
    bucket than the writer's), its bytes do not match the digest it was stored
    under, or the claim in history is malformed (an untrusted edge: a claim
    never opens a file outside the storage root). Raised while a payload is
    decoded: a workflow task fails and is retried until the object is back;
    a client call raises it.
    """


class TranscriptUnavailable(DurableToolsError):
    """A transcript read across runs found no run that holds an item it needs.

    E.g. an earlier run is past the namespace's retention (Temporal deletes
    closed runs then), or the runs answer inconsistently. Raised by
    `Conversations.history` and the model activity (which retries).
    """

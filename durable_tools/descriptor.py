"""Tool descriptors: what a model sees of a tool, whatever its kind or origin.

Typed tools, JSON-Schema tools, MCP tools and provider tools all render the same
`ToolDescriptor`; provider adapters (`durable_tools.providers`) map it to their
wire format. Descriptors are plain data, so the loop records exactly the
descriptors a model saw in workflow history.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ToolAnnotations", "ToolDescriptor", "ToolKind", "descriptors_digest"]

ToolKind = Literal["local", "provider", "signal", "interaction"]
"""Who executes a tool: this worker (`local`), the model provider (`provider`),
the agent loop (`signal`) or an outside actor such as a person (`interaction`)."""


class ToolAnnotations(BaseModel):
    """Behaviour hints for a tool, with the Model Context Protocol's defaults.

    The defaults are MCP's (spec 2025-06-18, `ToolAnnotations`): a tool is
    assumed to write (`read_only=False`), possibly destructively
    (`destructive=True`), not idempotent, and to reach an open world.

    Attributes:
        title: A human-readable title; `None` means the tool name.
        read_only: The tool does not modify its environment.
        destructive: Writes may destroy data (meaningful when not read-only).
        idempotent: Repeating a call with the same arguments has no more effect.
        open_world: The tool interacts with entities outside a closed domain.
    """

    model_config = ConfigDict(frozen=True)

    title: str | None = None
    read_only: bool = False
    destructive: bool = True
    idempotent: bool = False
    open_world: bool = True


class ToolDescriptor(BaseModel):
    """The model-visible description of one tool.

    Attributes:
        name: Tool name, matching `^[a-zA-Z0-9_-]{1,64}$`.
        description: What the tool does, for the model.
        parameters: JSON Schema (draft 2020-12) of the arguments object,
            preserved exactly as given (`$ref`, `$defs`, `oneOf` included).
        strict: Ask the provider for strict schema adherence (OpenAI strict mode).
        kind: Who executes it (see `ToolKind`).
        annotations: Behaviour hints (MCP defaults).
        provider: For `provider` tools, the provider that runs it (`"openai"`, …).
        provider_config: For `provider` tools, the provider-specific tool object
            (e.g. `{"type": "web_search"}`).
        answer_schema: For `interaction` tools, the JSON Schema an answer must
            satisfy; `None` accepts any JSON value.
    """

    model_config = ConfigDict(frozen=True)

    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    strict: bool = False
    kind: ToolKind = "local"
    annotations: ToolAnnotations = Field(default_factory=ToolAnnotations)
    provider: str | None = None
    provider_config: dict[str, Any] | None = None
    answer_schema: dict[str, Any] | None = None


def descriptors_digest(descriptors: list[ToolDescriptor]) -> str:
    """A stable SHA-256 hex digest of a list of descriptors.

    Used by the durable loop to record descriptors only when they change.

    Args:
        descriptors: Descriptors in the order the model sees them.

    Returns:
        64 lowercase hex characters.
    """
    text = json.dumps(
        [d.model_dump(mode="json") for d in descriptors], sort_keys=True, separators=(",", ":")
    )
    return hashlib.sha256(text.encode()).hexdigest()

"""Models: the `Model` interface, provider adapters and offline models."""

import importlib
from typing import TYPE_CHECKING

from durable_tools.models.base import Model, ModelRequest, Usage
from durable_tools.models.registry import resolve_model
from durable_tools.models.schema_driven import SchemaDrivenModel
from durable_tools.models.scripted import ScriptedFileModel

__all__ = [
    "Model",
    "ModelRequest",
    "SchemaDrivenModel",
    "ScriptedFileModel",
    "Usage",
    "resolve_model",
]

# Provider adapters load on first use: each needs its SDK extra
# (`pip install 'durable-tools[openai]'` / `[anthropic]`), and importing this
# package must work without them. Not in `__all__`, so `import *` never
# pulls in an SDK; type checkers see the classes themselves.
if TYPE_CHECKING:
    from durable_tools.models.anthropic import AnthropicModel as AnthropicModel
    from durable_tools.models.openai import OpenAIChatModel as OpenAIChatModel
    from durable_tools.models.openai import OpenAIResponsesModel as OpenAIResponsesModel

_PROVIDER_ADAPTERS = {
    "AnthropicModel": "durable_tools.models.anthropic",
    "OpenAIChatModel": "durable_tools.models.openai",
    "OpenAIResponsesModel": "durable_tools.models.openai",
}


def __getattr__(name: str) -> object:
    """Import a provider adapter (`OpenAIChatModel`, ...) when it is first used.

    Raises:
        ConfigurationError: The adapter's SDK is not installed (the message
            names the extra to install).
        AttributeError: No such name.
    """
    module = _PROVIDER_ADAPTERS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)

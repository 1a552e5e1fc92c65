"""Models: the `Model` interface, provider adapters and offline models."""

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

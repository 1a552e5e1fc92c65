"""Models: the `Model` interface, provider adapters and offline models."""

from durable_tools.models.base import Model, ModelRequest, Usage

__all__ = ["Model", "ModelRequest", "Usage"]

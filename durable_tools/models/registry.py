"""Model specs: one string names a model, built-in or from a provider.

| spec                      | model                                                   |
|---------------------------|---------------------------------------------------------|
| `test`                    | `SchemaDrivenModel()`: calls every tool once, summarizes |
| `scripted:PATH`           | `ScriptedFileModel(PATH)`: turns from a JSON/YAML file   |
| `openai:MODEL`            | `OpenAIChatModel(model=MODEL)` (Chat Completions)        |
| `openai-responses:MODEL`  | `OpenAIResponsesModel(model=MODEL)` (Responses API)      |
| `anthropic:MODEL`         | `AnthropicModel(model=MODEL)` (Messages API)             |

Provider modules are imported only when their spec is resolved, so the
offline models work without any provider SDK installed.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any, Final

from durable_tools.errors import ConfigurationError
from durable_tools.models.base import Model
from durable_tools.models.schema_driven import SchemaDrivenModel
from durable_tools.models.scripted import ScriptedFileModel

__all__ = ["MODEL_SPEC_FORMS", "confined", "resolve_model"]

MODEL_SPEC_FORMS: Final[tuple[str, ...]] = (
    "test",
    "scripted:PATH",
    "openai:MODEL",
    "openai-responses:MODEL",
    "anthropic:MODEL",
)
"""The accepted spec forms, for help texts and error messages."""

# spec prefix -> (module, class) of a provider model taking `model=MODEL`.
_PROVIDERS: Final[dict[str, tuple[str, str]]] = {
    "openai": ("durable_tools.models.openai", "OpenAIChatModel"),
    "openai-responses": ("durable_tools.models.openai", "OpenAIResponsesModel"),
    "anthropic": ("durable_tools.models.anthropic", "AnthropicModel"),
}


def resolve_model(
    spec: str,
    *,
    allow_offline: bool = True,
    scripts_dir: str | os.PathLike[str] | None = None,
) -> Model:
    """Build the model a spec names (see the table in the module docstring).

    A `scripted:` script is read and validated here, so a bad file is
    reported before any conversation starts.

    Args:
        spec: `test`, `scripted:PATH`, `openai:MODEL`,
            `openai-responses:MODEL` or `anthropic:MODEL`.
        allow_offline: Whether `test` and `scripted:PATH` may be built
            (default True; a worker passes its `allow_offline_models`).
        scripts_dir: When given, a `scripted:` path is read relative to this
            directory and must stay inside it (no absolute path elsewhere, no
            `..`, no symlink out of it); `None`: any path (a library caller's
            own file).

    Returns:
        A new model.

    Raises:
        ConfigurationError: The spec has none of the accepted forms, names an
            offline model while `allow_offline` is False, names a script
            outside `scripts_dir` (the message quotes nothing of the file),
            the script of a `scripted:` spec is unreadable or malformed, or a
            provider's module or SDK cannot be imported.

    Example:
        ```python
        model = resolve_model("scripted:demo/weather.yaml")
        ```
    """
    prefix, sep, rest = spec.partition(":")
    offline = spec == "test" or (prefix == "scripted" and sep)
    if offline and not allow_offline:
        raise ConfigurationError(
            f"model {spec!r} is an offline model, and this worker does not allow offline "
            "models (App(allow_offline_models=True), durable-tools worker --allow-offline-models)"
        )
    if spec == "test":
        return SchemaDrivenModel()
    if sep and rest:
        if prefix == "scripted":
            return ScriptedFileModel(rest if scripts_dir is None else confined(rest, scripts_dir))
        if prefix in _PROVIDERS:
            module_name, class_name = _PROVIDERS[prefix]
            return _provider_model(spec, module_name, class_name, rest)
    raise ConfigurationError(
        f"unknown model spec {spec!r}; use one of: {', '.join(MODEL_SPEC_FORMS)}"
    )


def confined(path: str, directory: str | os.PathLike[str]) -> Path:
    """`path` read relative to `directory`, refused unless it stays inside it.

    Symlinks are resolved first, so a link inside the directory that points
    out of it is refused too.

    Raises:
        ConfigurationError: The resolved path is outside the directory. The
            message names the path as given and nothing of the file (not
            even whether it exists).
    """
    root = Path(directory).resolve()
    try:
        target = (root / path).resolve()
    except (OSError, RuntimeError, ValueError):  # a symlink loop, a NUL byte
        target = None
    if target is None or not target.is_relative_to(root):
        raise ConfigurationError(
            f"script {path!r} is outside this worker's scripts directory; scripted models "
            "read only files under the directory the worker names (scripts_dir)"
        )
    return target


def _provider_model(spec: str, module_name: str, class_name: str, model: str) -> Model:
    try:
        module = importlib.import_module(module_name)
        cls: Any = getattr(module, class_name)
    except (ImportError, AttributeError) as exc:
        raise ConfigurationError(
            f"model spec {spec!r} needs {module_name}.{class_name}, which cannot be "
            f"imported ({exc}); install the provider's extra, e.g. "
            f"`pip install 'durable-tools[{spec.partition(':')[0].split('-')[0]}]'`"
        ) from None
    built: Model = cls(model=model)
    return built

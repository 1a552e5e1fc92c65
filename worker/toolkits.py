"""What a worker started from the command line serves: toolkits by spec, an app, or both.

`durable-tools worker --toolkit examples.support:kit` imports the `Toolkit`
object `kit` from the module `examples.support` and registers it under the
name `examples.support:kit`; the first `--toolkit` is also registered as
`default`, the toolkit `durable-tools run` uses unless told otherwise.
`--app module:attr` adds an application's toolkits and models (see
`durable_tools.worker.app.App`).
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Sequence

from durable_tools.errors import ConfigurationError
from durable_tools.specs import attribute_of, put_on_path, split_spec
from durable_tools.toolkit import Toolkit
from durable_tools.worker.app import App, load_app

__all__ = ["DEFAULT_TOOLKIT", "load_served", "load_toolkit"]

DEFAULT_TOOLKIT = "default"
"""The toolkit name `durable-tools run` uses by default."""


def _import(spec: str, what: str) -> object:
    module_name, _ = split_spec(spec, what, "examples.support:kit")
    put_on_path(".")  # a checkout works without installing, as with `--app`
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise ConfigurationError(
            f"cannot import module {module_name!r} of {what} spec {spec!r}: {exc}"
        ) from exc
    except Exception as exc:  # the module exists but raises on import (its own bug)
        raise ConfigurationError(
            f"importing module {module_name!r} of {what} spec {spec!r} raised "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    return attribute_of(module, spec, what)


def load_toolkit(spec: str) -> Toolkit:
    """Import a `Toolkit` object from a `"module:attribute"` spec.

    Args:
        spec: E.g. `"examples.support:kit"`; the attribute may be dotted. The
            current directory is put first on `sys.path` before importing.

    Returns:
        The toolkit.

    Raises:
        ConfigurationError: The spec is malformed, the module does not import,
            the attribute does not exist, or it is not a `Toolkit`.
    """
    found = _import(spec, "toolkit")
    if not isinstance(found, Toolkit):
        raise ConfigurationError(
            f"toolkit spec {spec!r} names a {type(found).__name__}, not a Toolkit "
            "(build one with Toolkit(tool_a, tool_b, ...))"
        )
    return found


def load_served(
    app_spec: str | None, toolkit_specs: Sequence[str], mcp_config: str | None = None
) -> App:
    """The toolkits and models a command-line worker serves.

    Args:
        app_spec: An application spec (`--app`), or `None`.
        toolkit_specs: Toolkit specs (`--toolkit`), each registered under its
            spec; the first also as `default`.
        mcp_config: A TOML file of MCP servers (`--mcp-config`, read by
            `durable_tools.mcp.load_mcp_config`), or `None`; its servers are
            added to the application's.

    Returns:
        The application (every field kept) with the toolkits given by spec
        added to its toolkits and the MCP configuration's servers to its
        own. `default` is the first toolkit given by spec; else the
        application's own `default`, else its first toolkit; with no
        toolkit at all, an empty toolkit (the model can still answer in text).

    Raises:
        ConfigurationError: A spec does not load (see `load_toolkit`,
            `durable_tools.worker.app.load_app`), or the MCP configuration is wrong.
    """
    try:
        application = load_app(app_spec) if app_spec else App()
    except ConfigurationError:
        raise
    except Exception as exc:  # load_app re-raises a module's own import failure
        raise ConfigurationError(
            f"importing app spec {app_spec!r} raised {type(exc).__name__}: {exc}"
        ) from exc
    given = {spec: load_toolkit(spec) for spec in toolkit_specs}
    toolkits = {**application.toolkits, **given}
    if given:
        toolkits[DEFAULT_TOOLKIT] = next(iter(given.values()))
    elif DEFAULT_TOOLKIT not in toolkits:
        first = next(iter(application.toolkits.values()), None)
        toolkits[DEFAULT_TOOLKIT] = first if first is not None else Toolkit(label="empty")
    servers = list(application.mcp_servers)
    if mcp_config is not None:
        from durable_tools.mcp import load_mcp_config  # imports the MCP SDK: only when asked

        servers += load_mcp_config(mcp_config)
    # Every other field of the application as it is (`context_strategies` was
    # once left out here, so an agent with a custom strategy failed to load).
    return dataclasses.replace(application, toolkits=toolkits, mcp_servers=servers)

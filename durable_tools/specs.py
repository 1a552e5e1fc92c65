"""`"module:attribute"` specs: how a command line names a Python object.

`--app examples.support:app`, `--toolkit examples.support:kit` and `--codec
myapp.crypto:codec` name an object as `uvicorn` names an ASGI app. Each loader
(`durable_tools.worker.app.load_app`, `durable_tools.worker.toolkits.load_toolkit`,
`durable_tools.codec.load_codec`) imports the module itself, since what an
import error means differs between them, and shares the rest here.
"""

from __future__ import annotations

import os
import sys

from durable_tools.errors import ConfigurationError

__all__ = ["attribute_of", "put_on_path", "split_spec"]


def split_spec(spec: str, what: str, example: str) -> tuple[str, str]:
    """The module name and (maybe dotted) attribute of a spec.

    Args:
        spec: E.g. `"examples.support:app"`.
        what: What the spec names, for the message (`"app"`, `"toolkit"`).
        example: A well-formed spec of that kind, for the message.

    Raises:
        ConfigurationError: The spec is not `module:attribute`.
    """
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ConfigurationError(
            f"invalid {what} spec {spec!r}: use 'module:attribute', e.g. {example!r}"
        )
    return module_name, attribute


def put_on_path(directory: str) -> None:
    """Put `directory` (made absolute) first on `sys.path`, unless it is there.

    So a checkout's modules import without installing it.
    """
    path = os.path.abspath(directory)
    if path not in sys.path:
        sys.path.insert(0, path)


def attribute_of(module: object, spec: str, what: str) -> object:
    """The object the spec's attribute names in its imported module.

    Raises:
        ConfigurationError: The module has no such attribute.
    """
    module_name, _, attribute = spec.partition(":")
    found = module
    for part in attribute.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise ConfigurationError(
                f"module {module_name!r} has no attribute {attribute!r} ({what} spec {spec!r})"
            ) from None
    return found

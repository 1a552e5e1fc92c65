"""Payload codecs (encryption, compression) with durable-tools' pydantic converter.

Temporal's data converter has three parts: the payload converter (values to
JSON payloads: durable-tools needs the pydantic one), the payload codec (bytes
to bytes: encryption lives here) and the failure converter. durable-tools
swaps only the first and keeps whatever codec and failure converter the
client was given, so with an encryption codec no tool argument, transcript
item or decision reaches workflow history in plaintext.

```python
from durable_tools.codec import data_converter

client = await Client.connect(address, data_converter=data_converter(MyAesGcmCodec()))
```

The CLI takes a codec as `--codec module:attr` (or `DURABLE_TOOLS_CODEC`), an
`App` as `App(payload_codec=...)`, and `durable-tools codec-server` serves
Temporal's codec server protocol so the Web UI can show decoded payloads.
"""

from __future__ import annotations

import dataclasses
import importlib

from temporalio.contrib.pydantic import PydanticPayloadConverter
from temporalio.converter import DataConverter, PayloadCodec

from durable_tools.errors import ConfigurationError
from durable_tools.specs import attribute_of, split_spec
from durable_tools.storage import PayloadStorage

__all__ = ["data_converter", "load_codec", "with_pydantic_payloads"]


def with_pydantic_payloads(existing: DataConverter | None) -> DataConverter:
    """`existing` with the pydantic payload converter; its codec and failure converter kept.

    A payload converter class that already subclasses `PydanticPayloadConverter`
    is kept as it is; `None` gives the plain pydantic data converter.
    """
    if existing is None:
        return data_converter()
    if issubclass(existing.payload_converter_class, PydanticPayloadConverter):
        return existing
    return dataclasses.replace(existing, payload_converter_class=PydanticPayloadConverter)


def data_converter(
    codec: PayloadCodec | None = None, *, storage: PayloadStorage | None = None
) -> DataConverter:
    """The pydantic data converter, with `codec` (default none) applied to every payload.

    Args:
        codec: A payload codec (e.g. encryption); default none.
        storage: External storage for large payloads (`durable_tools.storage`);
            default none: payloads stay in history, within Temporal's 2 MiB limit.
    """
    converter = DataConverter(payload_converter_class=PydanticPayloadConverter, payload_codec=codec)
    return storage.apply(converter) if storage is not None else converter


def load_codec(spec: str) -> PayloadCodec:
    """Import a payload codec from `"module:attribute"`.

    Args:
        spec: E.g. `"myapp.crypto:codec"`; the attribute is a `PayloadCodec`
            instance, or a callable with no arguments that returns one (read
            keys from the environment there, never from history).

    Returns:
        The codec.

    Raises:
        ConfigurationError: The spec is malformed, does not import, or names
            something that is not a `PayloadCodec`.
    """
    module_name, _ = split_spec(spec, "codec", "myapp.crypto:codec")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(f"cannot import the codec module {module_name!r}: {exc}") from exc
    found = attribute_of(module, spec, "codec")
    if not isinstance(found, PayloadCodec) and callable(found):
        found = found()
    if not isinstance(found, PayloadCodec):
        raise ConfigurationError(
            f"{spec!r} is a {type(found).__name__}, not a temporalio PayloadCodec "
            "(or a function returning one)"
        )
    return found

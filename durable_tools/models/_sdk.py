"""What the adapters built on a provider's official SDK share (Anthropic, OpenAI).

Both SDKs are generated alike: an `APIStatusError` with `status_code`,
`response.headers`, `body`, `message` and `request_id`, and a client built
from `api_key` / `base_url` or passed ready.
"""

from __future__ import annotations

from typing import Any

from temporalio.exceptions import ApplicationError

from durable_tools.errors import ConfigurationError
from durable_tools.models.errors import ProviderContext, status_error

__all__ = ["check_arguments", "sdk_status_error"]


def check_arguments(
    adapter: str,
    *,
    model: str,
    example: str,
    client: object | None,
    base_url: str | None,
    api_key: str | None,
) -> None:
    """Refuse an adapter without a model name, or with a client and its settings both.

    Args:
        adapter: The adapter's class name, for the message.
        model: The model name given.
        example: A model name to show in the message.
        client: The ready client given, if any.
        base_url: The base URL given, if any.
        api_key: The API key given, if any.

    Raises:
        ConfigurationError: No model name, or `client` with `base_url` or `api_key`.
    """
    if not model:
        raise ConfigurationError(
            f"{adapter}: give the model name, e.g. {adapter}(model={example!r})"
        )
    if client is not None and (base_url is not None or api_key is not None):
        raise ConfigurationError(
            f"{adapter}: pass either client=... or base_url=/api_key=..., not both "
            "(configure the client you pass instead)"
        )


def sdk_status_error(context: ProviderContext, exc: Any) -> ApplicationError:
    """Map the SDK's `APIStatusError` (an HTTP error answer) with `status_error`.

    Args:
        context: Who was called.
        exc: The SDK's `APIStatusError`.

    Returns:
        The error to raise.
    """
    return status_error(
        context,
        status=exc.status_code,
        headers=exc.response.headers,
        body=exc.body,
        fallback_message=exc.message,
        request_id=exc.request_id,
    )

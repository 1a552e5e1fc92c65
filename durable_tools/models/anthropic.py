"""Anthropic models through the official `anthropic` SDK (Messages API).

Install the SDK with `pip install 'durable-tools[anthropic]'`; importing this
module without it raises `ConfigurationError` saying so.

`AnthropicModel` renders the request with `durable_tools.providers.anthropic`
and sends it with `AsyncAnthropic.messages.create`. Credentials come from the
SDK's defaults (`ANTHROPIC_API_KEY`, then `ANTHROPIC_AUTH_TOKEN`, a profile,
...) and the base URL from `ANTHROPIC_BASE_URL`, unless given `api_key` /
`base_url` or a ready `client`.

Settings (`AgentConfig.settings`, merged over the adapter's `settings`) are
sent as request body fields as they are (`temperature`, `top_p`, `top_k`,
`thinking`, `tool_choice`, `metadata`, ...). `max_tokens` is required by
Anthropic: the adapter sends its `max_tokens` (default 4096) unless the
settings set one. A neutral `stop` is sent as `stop_sequences`.

**Streaming.** Inside the `model.turn` activity the adapter streams
(`stream: true`) and reports each text delta with
`durable_tools.models.streaming.text_delta` (published as
`model_text_delta` events); the SDK's `AsyncMessageStream` accumulates the
final `Message`, read exactly as a plain answer (text, tool calls, usage,
stop reason). A server that answers with plain JSON is read as a plain
answer; `stream=False` never streams. Outside the activity one plain
request is sent.

Errors become `ApplicationError`s that Temporal retries or not (see
`durable_tools.models.errors`); Anthropic's 529 `overloaded_error` is
retryable. The client is built with `max_retries=0` so the model activity's
retry policy owns every retry; pass `max_retries` to change that.

Example:
    ```python
    from durable_tools.models.anthropic import AnthropicModel

    models = {"claude": AnthropicModel(model="claude-sonnet-4-6", settings={"temperature": 0})}
    plugin = DurableToolsPlugin(toolkits={"main": toolkit}, models=models)
    ```
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from temporalio.exceptions import ApplicationError

from durable_tools.errors import ConfigurationError
from durable_tools.models._sdk import check_arguments, sdk_status_error
from durable_tools.models._settings import merge_settings, rename
from durable_tools.models.base import ModelRequest
from durable_tools.models.errors import (
    ProviderContext,
    connection_error,
    invalid_response,
    stream_broken,
)
from durable_tools.models.streaming import streaming_wanted, text_delta
from durable_tools.providers import anthropic as wire
from durable_tools.providers._wire import as_object
from durable_tools.transcript import AssistantMessage

try:
    import anthropic
    from anthropic.lib.streaming import AsyncMessageStream
except ImportError as exc:
    raise ConfigurationError(
        "durable_tools.models.anthropic needs the Anthropic SDK, an optional extra: "
        f"pip install 'durable-tools[anthropic]' ({exc})"
    ) from None

__all__ = ["AnthropicModel", "DEFAULT_MAX_TOKENS", "DEFAULT_TIMEOUT"]

DEFAULT_MAX_TOKENS: Final = 4096
"""`max_tokens` sent when neither the adapter nor the settings set one."""

DEFAULT_TIMEOUT: Final = 600.0
"""Seconds one HTTP request may take (the SDK's own default). Giving it
explicitly also skips the SDK's refusal of non-streaming requests with a large
`max_tokens`; the activity's start-to-close timeout bounds a turn anyway."""

_KEY_ENV: Final = "ANTHROPIC_API_KEY"
_RESERVED: Final = frozenset({"model", "messages", "system", "tools", "stream"})


class AnthropicModel:
    """A model served through the Anthropic Messages API.

    Server tools (web search, code execution) and thinking blocks come back in
    `AssistantMessage.provider_items` and are sent back verbatim on the next
    turn (see `durable_tools.providers.anthropic`).

    Args:
        model: The model name sent to the API (`"claude-sonnet-4-6"`).
        client: A ready `anthropic.AsyncAnthropic`; then `base_url` and
            `api_key` must not be given and its own `max_retries` applies.
        base_url: The API base URL (default `ANTHROPIC_BASE_URL`, else
            `https://api.anthropic.com`).
        api_key: The API key (default: the SDK's, `ANTHROPIC_API_KEY` first).
        settings: Default request body fields (`{"temperature": 0}`);
            `AgentConfig.settings` win key by key.
        max_tokens: Tokens the model may generate per turn when the settings
            set no `max_tokens` (default 4096).
        timeout: Seconds one HTTP request may take (default 600).
        max_retries: The SDK's own retries (default 0: Temporal retries).
        stream: Stream inside the `model.turn` activity, publishing text
            deltas (default True); False: always one plain JSON answer.

    Raises:
        ConfigurationError: No model name; both `client` and `base_url` /
            `api_key`; the SDK's credential profile is broken; a setting names
            a field the adapter renders (`model`, `messages`, `system`,
            `tools`, `stream`). No credentials at all is found per request
            (the SDK resolves them then) and fails the turn without retries.
    """

    def __init__(
        self,
        model: str,
        *,
        client: anthropic.AsyncAnthropic | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        settings: Mapping[str, Any] | None = None,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        timeout: float = DEFAULT_TIMEOUT,
        max_retries: int = 0,
        stream: bool = True,
    ) -> None:
        check_arguments(
            "AnthropicModel",
            model=model,
            example="claude-sonnet-4-6",
            client=client,
            base_url=base_url,
            api_key=api_key,
        )
        self.model = model
        self.settings: dict[str, Any] = merge_settings(
            settings or {}, {}, reserved=_RESERVED, adapter="AnthropicModel"
        )
        self.max_tokens = max_tokens
        self.timeout = timeout
        self.stream = stream
        if client is None:
            try:
                client = anthropic.AsyncAnthropic(
                    api_key=api_key, base_url=base_url, max_retries=max_retries
                )
            except anthropic.CredentialsError as exc:
                raise ConfigurationError(
                    f"AnthropicModel: no usable Anthropic credentials: set {_KEY_ENV} or pass "
                    f"api_key=... ({' '.join(str(exc).split())})"
                ) from None
        self.client = client
        self._context = ProviderContext(
            provider="Anthropic",
            api="Messages",
            model=model,
            base_url=str(self.client.base_url),
            key_env=_KEY_ENV,
        )

    def __repr__(self) -> str:
        return f"AnthropicModel(model={self.model!r}, base_url={self._context.base_url!r})"

    async def __call__(self, request: ModelRequest) -> AssistantMessage:
        """Answer one model request with one Messages API request.

        Args:
            request: The transcript, instructions (sent as `system`), tool
                descriptors and settings.

        Returns:
            The turn: text, tool calls, provider items, usage and stop reason.

        Raises:
            temporalio.exceptions.ApplicationError: The provider failed,
                retryable or not (see `durable_tools.models.errors`); also
                non-retryable `ProviderAuthentication` when the SDK finds no
                credentials at all.
            ConfigurationError: A setting names a reserved field, or an
                Anthropic provider tool has no config.
        """
        settings = merge_settings(
            self.settings, request.settings, reserved=_RESERVED, adapter="AnthropicModel"
        )
        rename(settings, "stop", "stop_sequences")
        if isinstance(settings.get("stop_sequences"), str):
            settings["stop_sequences"] = [settings["stop_sequences"]]
        max_tokens = settings.pop("max_tokens", self.max_tokens)
        body = wire.render_transcript(request.transcript, instructions=request.instructions or None)
        tools = wire.render_tools(request.tools)
        streamed = self.stream and streaming_wanted()
        try:
            create: Any = self.client.messages.with_raw_response.create
            raw: Any = await create(
                model=self.model,
                max_tokens=max_tokens,
                messages=body["messages"],
                system=body.get("system", anthropic.omit),
                tools=tools or anthropic.omit,
                stream=True if streamed else anthropic.omit,
                extra_body=settings,
                timeout=self.timeout,
            )
        except anthropic.APIStatusError as exc:
            raise sdk_status_error(self._context, exc) from exc
        except anthropic.APIConnectionError as exc:
            timed_out = isinstance(exc, anthropic.APITimeoutError)
            raise connection_error(self._context, exc, timed_out=timed_out) from exc
        except (anthropic.CredentialsError, TypeError) as exc:
            # The SDK resolves credentials per request: a missing key is a
            # TypeError ("Could not resolve authentication method"), a broken
            # profile a CredentialsError. Neither gets better by retrying.
            if isinstance(exc, TypeError) and "authentication" not in str(exc):
                raise
            raise ApplicationError(
                f"no usable Anthropic credentials: set {_KEY_ENV} or pass api_key=... to "
                f"AnthropicModel ({' '.join(str(exc).split())})",
                type="ProviderAuthentication",
                non_retryable=True,
            ) from exc
        content_type = raw.http_response.headers.get("content-type", "")
        if streamed and "text/event-stream" in content_type:
            data = await self._consume(raw.parse())
        else:  # not streamed, or the server answered a streamed request with JSON
            try:
                await raw.http_response.aread()
                data = raw.http_response.json()
            except ValueError as exc:
                raise invalid_response(self._context, exc) from exc
        try:
            return wire.parse_response(as_object(data, "response body"))
        except ValueError as exc:
            raise invalid_response(self._context, exc) from exc

    async def _consume(self, events: Any) -> Any:
        """Read the stream: text deltas out, the SDK's accumulated `Message` back as JSON."""
        try:
            stream = AsyncMessageStream(await events, anthropic.NOT_GIVEN)
            try:
                stopped = False
                async for event in stream:
                    if event.type == "text":
                        text_delta(event.text)
                    stopped = stopped or event.type == "message_stop"
                if not stopped:
                    raise ValueError("the stream ended before message_stop")
                message = await stream.get_final_message()
            finally:
                await stream.close()
        except Exception as exc:  # an `error` event (e.g. overloaded), a reset, a bad event
            raise stream_broken(self._context, exc) from exc
        return message.model_dump(mode="json", exclude_unset=True)

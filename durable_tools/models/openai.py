"""OpenAI models through the official `openai` SDK: Chat Completions and Responses.

Install the SDK with `pip install 'durable-tools[openai]'`; importing this
module without it raises `ConfigurationError` saying so.

| class | API | wire format |
|---|---|---|
| `OpenAIChatModel` | `POST /v1/chat/completions` | `durable_tools.providers.openai_chat` |
| `OpenAIResponsesModel` | `POST /v1/responses` | `durable_tools.providers.openai_responses` |

Both read the API key from `OPENAI_API_KEY` and the base URL from
`OPENAI_BASE_URL` (the SDK's own defaults) unless given `api_key` /
`base_url`, or a ready `client`. `base_url` points either at any
OpenAI-compatible server: Ollama (`http://localhost:11434/v1`), vLLM
(`http://localhost:8000/v1`), the llama.cpp server
(`http://localhost:8080/v1`). Those servers mostly ignore the key, so with a
`base_url` and no key anywhere the adapter sends a placeholder one. Most
compatible servers implement Chat Completions only: use `OpenAIChatModel`
with them.

Settings (`AgentConfig.settings`, merged over the adapter's `settings`) are
sent as request body fields as they are (`temperature`, `top_p`, `seed`,
`tool_choice`, `parallel_tool_calls`, `reasoning`, ...), with one rename each:
Chat Completions sends `max_tokens` as `max_completion_tokens` to
api.openai.com (which deprecated `max_tokens` and refuses it for reasoning
models) and unchanged to other servers; Responses sends it as
`max_output_tokens`.

**Streaming.** Inside the `model.turn` activity both adapters stream
(`stream: true`; Chat Completions also asks for `stream_options:
{"include_usage": true}` so the usage still arrives) and report each text
delta with `durable_tools.models.streaming.text_delta`: the activity
publishes them to the conversation's event stream (`model_text_delta`).
The turn returned is the same `AssistantMessage` a plain request gives
(text, tool calls, usage, stop reason), read from the SDK's accumulated
final object. A server that answers a streamed request with plain JSON is
read as a plain answer; `stream=False` never streams (for servers that
refuse `stream`). Outside the activity (no one listens) one plain request
is sent.

Chat Completions sends `tool_choice: "auto"` whenever it offers tools (a
`tool_choice` setting wins): that is OpenAI's default already, but some
compatible servers (llama-cpp-python's) show the model its tools only when
`tool_choice` is sent. An assistant turn that only called tools goes back
with `"content": ""`, never `null` (see `durable_tools.providers.openai_chat`).

Errors become `ApplicationError`s that Temporal retries or not (see
`durable_tools.models.errors`). The client is built with `max_retries=0`, so
the model activity's retry policy owns every retry (each attempt shows in
the workflow history, and no SDK back-off sleeps through the activity's
start-to-close timeout); pass `max_retries` to change that.

Example:
    ```python
    from durable_tools.models.openai import OpenAIChatModel

    models = {
        "gpt": OpenAIChatModel(model="gpt-5.4", settings={"temperature": 0.2}),
        "local": OpenAIChatModel(model="qwen3:8b", base_url="http://localhost:11434/v1"),
    }
    plugin = DurableToolsPlugin(toolkits={"main": toolkit}, models=models)
    ```
"""

from __future__ import annotations

import functools
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, ClassVar, Final, cast

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
from durable_tools.providers import openai_chat, openai_responses
from durable_tools.providers._wire import as_object
from durable_tools.transcript import AssistantMessage

try:
    import openai
    from openai.lib.streaming.chat import ChatCompletionStreamState
except ImportError as exc:
    raise ConfigurationError(
        "durable_tools.models.openai needs the OpenAI SDK, an optional extra: "
        f"pip install 'durable-tools[openai]' ({exc})"
    ) from None

__all__ = ["DEFAULT_TIMEOUT", "OpenAIChatModel", "OpenAIResponsesModel"]

DEFAULT_TIMEOUT: Final = 600.0
"""Seconds one HTTP request may take (the SDK's own default). The activity's
start-to-close timeout (`ConversationOptions.model_timeout`) bounds a turn too."""

_KEY_ENV: Final = "OPENAI_API_KEY"
_PLACEHOLDER_KEY: Final = "not-needed"


def _make_client(base_url: str | None, api_key: str | None, max_retries: int) -> openai.AsyncOpenAI:
    custom_server = base_url is not None or bool(os.environ.get("OPENAI_BASE_URL"))
    if api_key is None and custom_server and not os.environ.get(_KEY_ENV):
        api_key = _PLACEHOLDER_KEY
    try:
        return openai.AsyncOpenAI(api_key=api_key, base_url=base_url, max_retries=max_retries)
    except openai.OpenAIError as exc:
        raise ConfigurationError(
            f"no OpenAI API key: set {_KEY_ENV}, or pass api_key=... "
            f"(or base_url=... for an OpenAI-compatible server) ({exc})"
        ) from None


class _OpenAIModel:
    """What the Chat Completions and Responses adapters share."""

    _api: ClassVar[str]
    _reserved: ClassVar[frozenset[str]]

    def __init__(
        self,
        model: str,
        *,
        client: openai.AsyncOpenAI | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        settings: Mapping[str, Any] | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        max_retries: int = 0,
        stream: bool = True,
    ) -> None:
        name = type(self).__name__
        check_arguments(
            name,
            model=model,
            example="gpt-5.4",
            client=client,
            base_url=base_url,
            api_key=api_key,
        )
        self.model = model
        self.settings: dict[str, Any] = merge_settings(
            settings or {}, {}, reserved=self._reserved, adapter=name
        )
        self.timeout = timeout
        self.stream = stream
        self.client = client if client is not None else _make_client(base_url, api_key, max_retries)
        self._context = ProviderContext(
            provider="OpenAI",
            api=self._api,
            model=model,
            base_url=str(self.client.base_url),
            key_env=_KEY_ENV,
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r}, base_url={self._context.base_url!r})"

    def _settings_for(self, request: ModelRequest) -> dict[str, Any]:
        return merge_settings(
            self.settings, request.settings, reserved=self._reserved, adapter=type(self).__name__
        )

    def _streams(self) -> bool:
        return self.stream and streaming_wanted()

    async def _request(self, call: Callable[[], Awaitable[Any]]) -> Any:
        """Send one request, translating SDK errors at this one boundary."""
        try:
            return await call()
        except openai.APIStatusError as exc:
            raise sdk_status_error(self._context, exc) from exc
        except openai.APIConnectionError as exc:
            timed_out = isinstance(exc, openai.APITimeoutError)
            raise connection_error(self._context, exc, timed_out=timed_out) from exc

    async def _send(
        self,
        call: Callable[[], Awaitable[Any]],
        parse: Callable[[Mapping[str, Any]], AssistantMessage],
    ) -> AssistantMessage:
        """Send one plain request and read the answer."""
        raw = await self._request(call)
        return await self._read_json(raw, parse)

    async def _read_json(
        self, raw: Any, parse: Callable[[Mapping[str, Any]], AssistantMessage]
    ) -> AssistantMessage:
        try:
            await raw.http_response.aread()
            body: Any = raw.http_response.json()
            return parse(as_object(body, "response body"))
        except ValueError as exc:
            raise invalid_response(self._context, exc) from exc

    async def _send_streamed(
        self,
        call: Callable[[], Awaitable[Any]],
        parse: Callable[[Mapping[str, Any]], AssistantMessage],
        consume: Callable[[Any], Awaitable[Mapping[str, Any]]],
    ) -> AssistantMessage:
        """Send one streamed request; `consume` reads the events into the final body."""
        raw = await self._request(call)
        content_type = raw.http_response.headers.get("content-type", "")
        if "text/event-stream" not in content_type:  # the server ignored `stream`
            return await self._read_json(raw, parse)
        try:
            body = await consume(raw.parse())
        except ApplicationError:
            raise
        except Exception as exc:  # an `error` event, a dropped connection, a bad chunk
            raise stream_broken(self._context, exc) from exc
        try:
            return parse(body)
        except ValueError as exc:
            raise invalid_response(self._context, exc) from exc


class OpenAIChatModel(_OpenAIModel):
    """A model served through OpenAI Chat Completions (or a compatible server).

    Args:
        model: The model name sent to the API (`"gpt-5.4"`, `"qwen3:8b"`).
        client: A ready `openai.AsyncOpenAI`; then `base_url` and `api_key`
            must not be given and its own `max_retries` applies.
        base_url: The API base URL (default `OPENAI_BASE_URL`, else
            `https://api.openai.com/v1`); any OpenAI-compatible server works.
        api_key: The API key (default `OPENAI_API_KEY`; a placeholder when a
            `base_url` is set and there is no key).
        settings: Default request body fields (`{"temperature": 0.2}`);
            `AgentConfig.settings` win key by key.
        timeout: Seconds one HTTP request may take (default 600).
        max_retries: The SDK's own retries (default 0: Temporal retries).
        stream: Stream inside the `model.turn` activity, publishing text
            deltas (default True); False: always one plain JSON answer.

    Raises:
        ConfigurationError: No model name; both `client` and `base_url` /
            `api_key`; no API key anywhere; a setting names a field the
            adapter renders (`model`, `messages`, `tools`, `stream`).
    """

    _api = "Chat Completions"
    _reserved = frozenset({"model", "messages", "tools", "stream"})

    async def __call__(self, request: ModelRequest) -> AssistantMessage:
        """Answer one model request with one Chat Completions request.

        Args:
            request: The transcript, instructions (sent as a leading `system`
                message), tool descriptors and settings.

        Returns:
            The turn: text, tool calls, usage and stop reason.

        Raises:
            temporalio.exceptions.ApplicationError: The provider failed,
                retryable or not (see `durable_tools.models.errors`).
            ConfigurationError: A setting names a reserved field.
            StrictModeError: A strict tool's schema breaks OpenAI's strict mode.
        """
        settings = self._settings_for(request)
        if self.client.base_url.host == "api.openai.com":
            rename(settings, "max_tokens", "max_completion_tokens")
        body = openai_chat.render_transcript(
            request.transcript, instructions=request.instructions or None
        )
        tools = openai_chat.render_tools(request.tools)
        if tools and "tool_choice" not in settings:
            settings["tool_choice"] = "auto"  # some servers show tools only with it
        create = functools.partial(
            self.client.chat.completions.with_raw_response.create,
            model=self.model,
            messages=body["messages"],
            tools=cast(Any, tools) if tools else openai.omit,
            extra_body=settings,
            timeout=self.timeout,
        )
        if not self._streams():
            return await self._send(lambda: create(), openai_chat.parse_response)
        return await self._send_streamed(
            lambda: create(stream=True, stream_options={"include_usage": True}),
            openai_chat.parse_response,
            _consume_chat,
        )


class OpenAIResponsesModel(_OpenAIModel):
    """A model served through the OpenAI Responses API.

    Reasoning items and provider-executed tool items (web search, ...) come
    back in `AssistantMessage.provider_items` and are sent back verbatim on
    the next turn (see `durable_tools.providers.openai_responses`).

    Args:
        model: The model name sent to the API (`"gpt-5.4"`).
        client: A ready `openai.AsyncOpenAI`; then `base_url` and `api_key`
            must not be given and its own `max_retries` applies.
        base_url: The API base URL (default `OPENAI_BASE_URL`, else
            `https://api.openai.com/v1`).
        api_key: The API key (default `OPENAI_API_KEY`; a placeholder when a
            `base_url` is set and there is no key).
        settings: Default request body fields (`{"reasoning": {"effort":
            "low"}}`); `AgentConfig.settings` win key by key; `max_tokens` is
            sent as `max_output_tokens`.
        timeout: Seconds one HTTP request may take (default 600).
        max_retries: The SDK's own retries (default 0: Temporal retries).
        stream: Stream inside the `model.turn` activity, publishing text
            deltas (default True); False: always one plain JSON answer.

    Raises:
        ConfigurationError: No model name; both `client` and `base_url` /
            `api_key`; no API key anywhere; a setting names a field the
            adapter renders (`model`, `input`, `instructions`, `tools`,
            `stream`).
    """

    _api = "Responses"
    _reserved = frozenset({"model", "input", "instructions", "tools", "stream"})

    async def __call__(self, request: ModelRequest) -> AssistantMessage:
        """Answer one model request with one Responses API request.

        Args:
            request: The transcript, instructions (sent as `instructions`),
                tool descriptors and settings.

        Returns:
            The turn: text, tool calls, provider items, usage and stop reason.

        Raises:
            temporalio.exceptions.ApplicationError: The provider failed,
                retryable or not (see `durable_tools.models.errors`).
            ConfigurationError: A setting names a reserved field.
            StrictModeError: A strict tool's schema breaks OpenAI's strict mode.
        """
        settings = self._settings_for(request)
        rename(settings, "max_tokens", "max_output_tokens")
        body = openai_responses.render_transcript(
            request.transcript, instructions=request.instructions or None
        )
        tools = openai_responses.render_tools(request.tools)
        create = functools.partial(
            self.client.responses.with_raw_response.create,
            model=self.model,
            input=body["input"],
            instructions=body.get("instructions", openai.omit),
            tools=cast(Any, tools) if tools else openai.omit,
            extra_body=settings,
            timeout=self.timeout,
        )
        if not self._streams():
            return await self._send(lambda: create(), openai_responses.parse_response)
        return await self._send_streamed(
            lambda: create(stream=True), openai_responses.parse_response, _consume_responses
        )


async def _consume_chat(stream: Any) -> Mapping[str, Any]:
    """Read Chat Completions chunks: text deltas out, the accumulated completion back.

    Raises:
        ValueError: The stream ended before the first choice's `finish_reason`.
    """
    state = ChatCompletionStreamState()
    finished = False
    async for chunk in stream:
        state.handle_chunk(chunk)
        for choice in chunk.choices:
            if choice.index == 0 and choice.delta.content:
                text_delta(choice.delta.content)
            finished = finished or (choice.index == 0 and choice.finish_reason is not None)
    if not finished:
        raise ValueError("the stream ended before a finish_reason")
    completion = state.get_final_completion()
    body: dict[str, Any] = completion.model_dump(mode="json", exclude_unset=True)
    return body


async def _consume_responses(stream: Any) -> Mapping[str, Any]:
    """Read Responses events: text deltas out, the final `response` object back.

    Raises:
        ValueError: The stream ended without `response.completed`,
            `response.incomplete` or `response.failed`.
    """
    final: Any = None
    async for event in stream:
        if event.type == "response.output_text.delta":
            text_delta(event.delta)
        elif event.type in ("response.completed", "response.incomplete", "response.failed"):
            final = event.response
    if final is None:
        raise ValueError("the stream ended without its final response event")
    body: dict[str, Any] = final.model_dump(mode="json", exclude_unset=True)
    return body

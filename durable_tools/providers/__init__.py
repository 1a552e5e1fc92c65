"""Provider wire formats: descriptors, transcripts and responses as plain dicts.

One module per API, each with the same three pure functions (no HTTP, no SDK,
no I/O at import, so they run inside the Temporal workflow sandbox as well as
in activities):

| module | API |
|---|---|
| `openai_chat` | OpenAI Chat Completions |
| `openai_responses` | OpenAI Responses |
| `anthropic` | Anthropic Messages |

- `render_tools(descriptors) -> list[dict]`: the request's `tools`. Provider
  tools are sent only to the provider that runs them. OpenAI renderers raise
  `StrictModeError` for a strict descriptor whose schema breaks strict mode.
- `render_transcript(transcript, *, instructions=None) -> dict`: the request
  body fields that carry the conversation (`messages` or `input`, plus
  `system`/`instructions`), ready to merge into the body. Tool outputs are
  read from `ToolCallOutput.content` / `is_error`, as produced by
  `durable_tools.transcript.to_tool_call_output`.
- `parse_response(response) -> AssistantMessage`: the model turn. Whatever
  the model wrote (arguments that are not JSON, unknown tool names) is kept
  raw for the executor to answer with a `Failure`; only a response whose
  structure is wrong raises `ValueError`.

`AssistantMessage.provider_items` hold provider-specific shapes; a transcript
that carries them can be sent back only to the provider that produced them.
"""

from __future__ import annotations

from durable_tools.providers import anthropic, openai_chat, openai_responses

__all__ = ["anthropic", "openai_chat", "openai_responses"]

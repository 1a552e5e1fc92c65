"""The `transcript_slice` query pages by UTF-8 bytes, not characters.

Temporal rejects a query result over 2 MB; a page measured in characters can be
three times that in bytes for CJK text, which left the model activity retrying
the query forever.
"""

import json

from durable_tools._wire import CarriedState, ConversationInput
from durable_tools.conversation import AgentConfig, TranscriptSlice
from durable_tools.transcript import AssistantMessage, ToolCallOutput, UserMessage
from durable_tools.workflows.agent_workflow import AgentWorkflow


def _workflow(transcript: list) -> AgentWorkflow:
    agent = AgentConfig(model="m", toolkit="t")
    state = CarriedState(agent="default", transcript=transcript)
    return AgentWorkflow(ConversationInput(agents={"default": agent}, agent="default", state=state))


def test_pages_fit_in_max_bytes_for_multibyte_text():
    big = "界" * 400_000  # 400k characters, 1.2 MB of UTF-8
    transcript = [
        UserMessage(text="hi"),
        AssistantMessage(),
        ToolCallOutput(call_id="a", tool="t", content=big),
        ToolCallOutput(call_id="b", tool="t", content=big),
    ]
    wf = _workflow(transcript)
    start, pages = 0, []
    while start < len(transcript):
        page = wf.transcript_slice(
            TranscriptSlice(upto=len(transcript), start=start, max_bytes=1_000_000)
        )
        pages.append(page)
        start += len(page)
    assert [len(p) for p in pages] == [2, 1, 1]
    for page in pages[:1]:
        encoded = json.dumps([i.model_dump(mode="json") for i in page], ensure_ascii=False)
        assert len(encoded.encode()) <= 1_000_000

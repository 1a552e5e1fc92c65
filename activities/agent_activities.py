"""The model activity and the tool activity of the durable loop.

* `model.turn` reads the transcript through a query to the workflow (so the
  transcript is never recorded as activity input: history grows linearly),
  only the items this worker has not read yet (`transcript_cache.py`),
  builds the model's view of it under the agent's context policy
  (`context_window.py`; on a context-length error it summarizes and tries
  once more), calls the model adapter, makes its output safe to record
  (`model_output.py`), and plans the turn's calls (`planning.py`). It
  heartbeats while it runs, so a worker lost during a slow provider request
  is noticed after the heartbeat timeout, not the model timeout; whatever it
  raises is bounded to one line (`bounded_failure`), its full text logged.
* `tool.<name>` (one dynamic activity) runs one tool call. Its activity type
  names the tool, so `temporal workflow show` reads like the conversation.
  The attempt heartbeats, delivers progress and is stopped on cancellation
  or timeout as `tool_run.py` describes; sync tools run in the worker's
  bounded `ToolThreads`.
* `policy.reevaluate-v1` decides calls that wait for approval again under
  a policy version a live change installed (`policy_activity.py`).
* `model.sample-v1` answers an MCP server's sampling request with the
  conversation's model (`sampling_activity.py`).
"""

from __future__ import annotations

from durable_tools.activities.policy_activity import PolicyActivity
from durable_tools.activities.sampling_activity import SamplingActivity
from durable_tools.activities.sub_agent_activity import SubAgentActivity
from durable_tools.activities.tool_activity import ToolActivity

__all__ = ["AgentActivities"]


class AgentActivities(SamplingActivity, PolicyActivity, SubAgentActivity, ToolActivity):
    """Activities bound to the toolkits and model adapters of one worker.

    Args:
        toolkits: Toolkits by the name conversations refer to.
        models: Model adapters by name.
        mcp: The worker's MCP servers (started by the worker's run context);
            their tools join every toolkit.
        agents: The agents the worker declares (see `durable_tools.agents`);
            each model turn resolves the conversation's `AgentConfig`
            against them. Empty (default): development mode, any
            configuration runs as sent.
        allow_offline_models: Whether a conversation may name the offline
            models `test` and `scripted:FILE` when they are not registered
            (default False).
        scripts_dir: The directory `scripted:FILE` paths are read under;
            a path outside it is refused. `None` (default): the working
            directory.
        redact: Applied to every tool failure's text before it reaches
            history or the model (default: `Redactor.from_environment()`, see
            `durable_tools.redact`).
        transcripts: The transcripts this worker read, by conversation, so a
            model turn reads only the items it lacks, across continue-as-new
            too (default a `TranscriptCache()`: 256 MiB, 1024 conversations;
            see `transcript_cache.py`).
        max_payload_bytes: The largest tool result (JSON bytes) and tool-call
            argument text (UTF-8 bytes, per turn) when the worker stores large
            payloads externally (`PayloadStorage.max_payload_bytes`, e.g.
            64 MiB). `None` (default): no external storage, so Temporal's
            2 MiB payload limit applies: results over
            `ToolActivityInput.max_result_bytes` (1.5 MB), arguments over
            1 MiB per call or 1.5 MB per turn are refused.
        context_strategies: Custom context strategies by the name a
            `CustomStrategy` in a context policy gives (default none; see
            `durable_tools.context`).
        tool_threads: Most sync tool calls running at once, each in a thread
            of the worker's pool (`durable_tools.tool_threads`); `None`
            (default): the worker's `max_concurrent_activities` (the plugin
            sets it when the worker is built), else 100.
        policies: Default approval policies by toolkit name and by
            `mcp:SERVER` (`App.policies`; default none).
        prices: The price table by model (`App.prices`; default none): each
            model turn's cost is computed here and recorded in its result.

    Raises:
        ConfigurationError: A declared agent is one the worker cannot serve
            (see `check_agents`), or its context policies name a custom
            strategy not in `context_strategies`.

    Attributes:
        deps: The worker's dependencies, given to every tool run as
            `ToolContext.deps`; the plugin's run context sets it when the
            worker starts (`App(deps=...)`), `None` otherwise.
        tool_threads: The pool sync tools run in (`ToolThreads`).
    """

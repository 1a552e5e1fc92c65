"""The application CLI tests serve: `agent_support`'s toolkit and scripted models.

Worker subprocesses import it as `cli_app:app` (`PYTHONPATH` holds `tests` and
`tests/worker`); `directed` plays a script written in the user message.
"""

from __future__ import annotations

from agent_support import MODELS, TOOLKIT

from worker.runner import App

app = App(toolkits={"tests": TOOLKIT}, models=MODELS)
kit = TOOLKIT

"""The durable-tools worker: the application, plugin, runner, CLI and embedded dev server.

```python
from durable_tools.worker import App, run_worker
```

A script that runs a worker or a client ends with `run_and_exit(main)`
(`durable_tools.worker.exits`: no abort at interpreter finalization).
"""

from __future__ import annotations

from durable_tools.worker.exits import run_and_exit
from durable_tools.worker.plugin import PASSTHROUGH_MODULES, DurableToolsPlugin, sandbox_runner
from durable_tools.worker.runner import App, load_app, run_worker

__all__ = [
    "PASSTHROUGH_MODULES",
    "App",
    "DurableToolsPlugin",
    "load_app",
    "run_and_exit",
    "run_worker",
    "sandbox_runner",
]

"""The durable-tools worker: the application, plugin, runner, CLI and embedded dev server.

```python
from durable_tools.worker import App, run_worker
```
"""

from __future__ import annotations

from durable_tools.worker.plugin import PASSTHROUGH_MODULES, DurableToolsPlugin, sandbox_runner
from durable_tools.worker.runner import App, load_app, run_worker

__all__ = [
    "PASSTHROUGH_MODULES",
    "App",
    "DurableToolsPlugin",
    "load_app",
    "run_worker",
    "sandbox_runner",
]

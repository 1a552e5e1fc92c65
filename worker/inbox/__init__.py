"""The approval inbox: a web page and an HTTP API for the people who decide.

```python
from durable_tools.worker.inbox import create_app, DevAuth, Authenticators
app = create_app(conversations, Authenticators([DevAuth("ana")]))
```

`durable-tools inbox` serves it (`serve_inbox`); `durable-tools dev` serves it
beside the dev server. Needs the `inbox` extra (FastAPI, Jinja2, uvicorn).
"""

from __future__ import annotations

from durable_tools.worker.inbox.app import create_app
from durable_tools.worker.inbox.assertions import Jwks, ProxyAssertionAuth
from durable_tools.worker.inbox.auth import (
    Authenticators,
    Csrf,
    DevAuth,
    Identity,
    ProxyHeaderAuth,
    Rejected,
    TokenAuth,
    may_decide,
)
from durable_tools.worker.inbox.server import build_auth, serve_inbox

__all__ = [
    "Authenticators",
    "Csrf",
    "DevAuth",
    "Identity",
    "Jwks",
    "ProxyAssertionAuth",
    "ProxyHeaderAuth",
    "Rejected",
    "TokenAuth",
    "build_auth",
    "create_app",
    "may_decide",
    "serve_inbox",
]

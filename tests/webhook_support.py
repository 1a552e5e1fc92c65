"""A real webhook receiver on 127.0.0.1 for the notification tests.

`Receiver` is a `http.server` in a thread: it fails its first `fail_first`
requests with HTTP 500, then verifies each signature and accepts each event
id once (a repeated id is answered 200 and counted as a duplicate, as a
receiver that keeps the ids it accepted does).
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from durable_tools.webhooks import ID_HEADER, SIGNATURE_HEADER, verify_signature

SECRET = "webhook-test-secret-0123456789"


@dataclass
class Receiver:
    """What the receiver saw: every request's id, the accepted events, bad signatures."""

    url: str = ""
    fail_first: int = 2
    requests: list[str] = field(default_factory=list[str])
    accepted: dict[str, dict[str, Any]] = field(default_factory=dict[str, dict[str, Any]])
    bad_signatures: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def duplicates(self) -> Counter[str]:
        """Ids received more than once (retries after a failed or lost answer)."""
        counts = Counter(self.requests)
        return Counter({k: n for k, n in counts.items() if n > 1})

    def kinds(self) -> list[tuple[str, str]]:
        """The accepted events as (kind, call id), in the order they were accepted."""
        with self.lock:
            return [(e["kind"], e["call_id"]) for e in self.accepted.values()]


@contextmanager
def receiving(fail_first: int = 2) -> Iterator[Receiver]:
    """Serve a `Receiver` on 127.0.0.1 (a free port) for the block."""
    receiver = Receiver(fail_first=fail_first)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            event_id = self.headers.get(ID_HEADER, "")
            with receiver.lock:
                receiver.requests.append(event_id)
                failing = len(receiver.requests) <= receiver.fail_first
                signed = verify_signature(
                    SECRET, self.headers.get(SIGNATURE_HEADER, ""), body, time.time()
                )
                if not signed:
                    receiver.bad_signatures += 1
                elif not failing and event_id not in receiver.accepted:
                    receiver.accepted[event_id] = json.loads(body)
            status = 500 if failing else (200 if signed else 401)
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}/hooks"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join()

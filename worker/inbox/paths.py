"""Workflow ids and call ids as one URL path segment each, whatever they contain.

A workflow id is any text up to Temporal's length limit, `/` included
(`tenant/42`). Links quote it whole (`quote(id, safe="")`, JavaScript's
`encodeURIComponent`), so `tenant/42` travels as `tenant%2F42`. Starlette
routes on the decoded path, where that `%2F` has become a `/` and the id two
segments. `KeepEncodedSlashes` routes on the path as sent instead, decoding
everything but `%2F`, `%3A` and `%25`; the `segment` convertor then decodes
those three in the parameter it hands the endpoint. A path without them
routes exactly as before.

The ids `.` and `..` are the exception: as segments they are dot segments,
which every client removes before sending (RFC 3986 section 5.2.4; browsers
also treat `%2E` as a dot), so `/c/.` would reach `/c/`. They travel as `:.`
and `:..`: a literal `:` is never part of a quoted segment (`quote` and
`encodeURIComponent` both send `%3A`), and `%3A` stays encoded for routing,
so the id `:.` (sent `%3A.`) stays itself.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote, unquote

from starlette.convertors import Convertor, register_url_convertor
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["KeepEncodedSlashes", "quote_segment"]

_KEPT = re.compile(rb"(%(?:2[fF]|3[aA]|25))")  # captured: `split` keeps them, at odd indexes
_DOT_SEGMENTS = (".", "..")
_ESCAPE = ":"


def quote_segment(text: str) -> str:
    """`text` as one path segment: every reserved character percent-encoded, `/` too.

    The dot segments `.` and `..`, which clients would remove, become `:.` and `:..`.
    """
    if text in _DOT_SEGMENTS:
        return _ESCAPE + text
    return quote(text, safe="")


class _Segment(Convertor[str]):
    """One path segment; `%2F`, `%3A` and `%25` (left encoded by the middleware) decoded."""

    regex = "[^/]+"

    def convert(self, value: str) -> str:
        """The segment's text: `:.` and `:..` are the dot segments; else decoded.

        `%2F` is `/`, `%3A` is `:`, `%25` is `%` (`%25` last, so `%252F` is `%2F`).
        """
        if value.startswith(_ESCAPE) and value[1:] in _DOT_SEGMENTS:
            return value[1:]
        return value.replace("%2F", "/").replace("%3A", ":").replace("%25", "%")

    def to_string(self, value: str) -> str:
        """`value` quoted as one segment (for `url_path_for`)."""
        return quote_segment(value)


register_url_convertor("segment", _Segment())  # `/conversations/{workflow_id:segment}`


class KeepEncodedSlashes:
    """ASGI middleware: route on the path as sent, with `%2F`, `%3A` and `%25` still encoded.

    Args:
        app: The application to call with the rewritten scope.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Call the app with `scope["path"]` rebuilt from `raw_path` when it has a kept escape."""
        raw: Any = scope.get("raw_path") if scope["type"] in ("http", "websocket") else None
        if isinstance(raw, bytes) and _KEPT.search(raw):
            parts = _KEPT.split(raw)
            path = "".join(
                part.decode("ascii").upper() if kept else _decoded(part)
                for kept, part in zip([False, True] * len(parts), parts, strict=False)
            )
            scope = {**scope, "path": path}
        await self.app(scope, receive, send)


def _decoded(part: bytes) -> str:
    return unquote(part.decode("latin-1"), encoding="utf-8", errors="replace")

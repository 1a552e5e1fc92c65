"""Scrub secrets out of text before it reaches history, the model, spans or logs.

Exception messages carry what the code that raised them had at hand: URLs with
credentials, bearer tokens, API keys in query strings, file paths. A tool's or
a model's failure text is recorded in workflow history (Temporal stores it, the
Web UI shows it) and shown to the model; the same text reaches the worker's
spans (recorded exceptions, statuses) and its log. So the worker passes it
through a `Redactor` first:

1. the values of secrets the worker knows, longest first: environment
   variables whose names say secret (`*API_KEY*`, `*TOKEN*`, `*SECRET*`,
   `*PASSWORD*`, `*CREDENTIAL*`, `*PRIVATE_KEY*`, and the suffixes `_KEY`,
   `_KEYS`, `_PWD`, `_PASS`, `_DSN`, plus `OTEL_EXPORTER_OTLP_*HEADERS`; so
   `OPENAI_API_KEY`, `ANTHROPIC_API_KEY`, `DURABLE_TOOLS_DECISION_KEYS`,
   `DURABLE_TOOLS_INBOX_SECRET`, `DURABLE_TOOLS_INBOX_TOKENS`), each entry of
   a list-valued one (`KEY_ID:BASE64,...`, `name:token` lines: every piece of
   at least 16 characters), MCP servers' tokens, headers and `env`, the
   worker's decision keys, and whatever `register_secrets` was given; each
   also in its URL-encoded form;
2. credential shapes: URL user-info (`https://user:pass@host`), `Bearer …` /
   `Basic …`, `Authorization: <anything>`, assignments whose name says secret
   (`token=…`, `api_key: "…"`, `"client_secret": "…"`, `DB_PWD=…`,
   `SENTRY_DSN=…`, `X_KEY=…`, `credentials=…`, also as `?api_key=…` in a URL),
   `?key=…` in URLs, and well-known key formats (`sk-…`, `ghp_…`, `xox?-…`,
   `AKIA…`); an assignment whose whole value is the placeholder `...` or `…`
   is a hint, not a secret, and stays (`pass api_key=... to OpenAIChatModel`);
3. truncation to `max_chars` (default 2,000), so a failure always fits
   Temporal's failure size limit (`Redactor.scrub` does steps 1 and 2 only,
   for spans and logs).

Each match becomes `[redacted]`. A value shorter than 6 characters is never
treated as a secret (it would redact ordinary words).

`worker_redactor()` is the process's redactor (the environment's secrets and
the registered ones) that the worker's span processor and log filter use
(`durable_tools.worker.telemetry`, `durable_tools.worker.log_redaction`).
"""

from __future__ import annotations

import base64
import os
import re
import threading
from collections.abc import Iterable, Mapping
from typing import Final
from urllib.parse import quote, quote_plus

__all__ = [
    "DEFAULT_MAX_CHARS",
    "REDACTED",
    "Redactor",
    "key_forms",
    "register_secrets",
    "secret_env_values",
    "worker_redactor",
]

REDACTED: Final[str] = "[redacted]"

DEFAULT_MAX_CHARS: Final[int] = 2_000
"""Longest failure text kept, in characters (Temporal's failure limit is far larger)."""

_MIN_SECRET_CHARS: Final[int] = 6
"""Shorter values are not treated as secrets (they would redact ordinary words)."""

_MIN_PIECE_CHARS: Final[int] = 16
"""Shortest piece of a list-valued secret taken as a secret of its own: key ids,
user names and group names in `KEY_ID:BASE64` or `name:token:groups` are shorter."""

_SECRET_NAME: Final[re.Pattern[str]] = re.compile(
    r"""(?ix)
    api[_-]?key|token|secret|passw(?:or)?d|credential|private[_-]?key
    |[_-](?:keys?|pwd|pass|dsn)$
    |^otel_exporter_otlp_(?:\w+_)?headers$
    """
)

_PIECES: Final[re.Pattern[str]] = re.compile(r"[\s,;:=]+")

_PLACEHOLDER: Final[str] = r"(?:\.{3}|…)"

_NAME: Final[str] = r"""
    \b[\w-]*(?:token|secret|passw(?:or)?d|pwd|api[_-]?key|apikey|access[_-]?key
        |private[_-]?key|client[_-]?secret|signature|sig|auth|dsn|credential|[_-]key)s?
    """
"""A name that says its value is secret (`token`, `DB_PWD`, `X_KEY`, `client_secret`...)."""

_NAME_HINT: Final[re.Pattern[str]] = re.compile(r"(?i)token|secret|pass|pwd|key|sig|auth|dsn|cred")
"""A word every `_NAME` contains: text without one skips the patterns built on `_NAME`
(they cost about 2 s per 3 MB each, the others a tenth of that)."""

_SCRUB_MARGIN: Final[int] = 4_096
"""Characters past `max_chars` scrubbed before a long text is cut, so a secret across
the cut goes too (see `Redactor.__call__`)."""

_NOT_DONE: Final[str] = r"(?!\[redacted\])"
"""Not a value redacted already (by a known secret), which would read `[redacted]]`."""

_PATTERNS: Final[tuple[tuple[re.Pattern[str], str], ...]] = (
    # https://user:password@host -> https://[redacted]@host
    (re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)[^/\s:@]+:[^/\s@]+(?=@)"), r"\g<scheme>"),
    # Authorization: Bearer xyz / Authorization: xyz (any length, any scheme).
    (
        re.compile(
            rf"""(?ix)
            (?P<scheme>\b(?:proxy-)?authorization["']?\s*[=:]\s*["']?
                (?:(?:bearer|basic|token|digest|apikey)\s+)?)
            {_NOT_DONE}(?!(?:bearer|basic|token|digest|apikey)\s)(?!{_PLACEHOLDER}(?:["'\s]|$))
            [^\s"',;]+
            """
        ),
        r"\g<scheme>",
    ),
    # Bearer xyz / Basic xyz outside a header.
    (
        re.compile(rf"(?i)\b(?P<scheme>bearer|basic|token)\s+{_NOT_DONE}[A-Za-z0-9._~+/=-]{{8,}}"),
        r"\g<scheme> ",
    ),
    # "api_key": "a b c" and 'password': 'x y': a quoted value, spaces included.
    *(
        (
            re.compile(
                rf"""(?ix)
                (?P<scheme>{_NAME}["']?\s*[=:]\s*{quote_char})
                {_NOT_DONE}(?!{_PLACEHOLDER}{quote_char})
                [^{quote_char}\n]+(?={quote_char})
                """
            ),
            r"\g<scheme>",
        )
        for quote_char in ('"', "'")
    ),
    # token=abc, DB_PWD=abc, ?api_key=abc; not a placeholder such as the
    # `pass api_key=...` of a hint, which would read `pass api_key=[redacted]`.
    (
        re.compile(
            rf"""(?ix)
            (?P<scheme>{_NAME}["']?\s*[=:]\s*)
            {_NOT_DONE}(?!{_PLACEHOLDER}(?:[\s&"',;)}}\]]|$))(?!["'])
            [^\s&"',;)}}\]]+
            """
        ),
        r"\g<scheme>",
    ),
    # An MCP `requestState` (opaque, may be secret) in JSON or protobuf text,
    # its quotes escaped or not: `"request_state":"..."`, `\"requestState\":\"...\"`.
    (
        re.compile(
            rf"""(?ix)
            (?P<scheme>\brequest_?state\\*["']?\s*[=:]\s*\\*["']?)
            {_NOT_DONE}(?!null\b)(?!None\b)
            [^\s"'\\,;)}}\]]+
            """
        ),
        r"\g<scheme>",
    ),
    # ?key=... in a URL's query (Google-style API keys).
    (re.compile(rf"(?i)(?P<scheme>[?&]key=){_NOT_DONE}[^&\s\"'#]+"), r"\g<scheme>"),
    # Well-known key formats.
    (re.compile(r"\b(?P<scheme>)(?:sk|rk|pk)-[A-Za-z0-9_-]{16,}"), r"\g<scheme>"),
    (re.compile(r"\b(?P<scheme>)gh[pousr]_[A-Za-z0-9]{20,}"), r"\g<scheme>"),
    (re.compile(r"\b(?P<scheme>)xox[abposr]-[A-Za-z0-9-]{10,}"), r"\g<scheme>"),
    (re.compile(r"\b(?P<scheme>)(?:AKIA|ASIA)[0-9A-Z]{16}\b"), r"\g<scheme>"),
)

_NAMED: Final[frozenset[re.Pattern[str]]] = frozenset(p for p, _ in _PATTERNS if _NAME in p.pattern)
"""The patterns built on `_NAME`, skipped in text without a `_NAME_HINT`."""


def secret_env_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """Values of environment variables whose names say they hold secrets.

    Args:
        environ: The environment (default `os.environ`).

    Returns:
        The values of at least 6 characters whose variable names contain
        `api_key`, `token`, `secret`, `password`/`passwd`, `credential` or
        `private_key`, end in `_KEY`, `_KEYS`, `_PWD`, `_PASS` or `_DSN`, or
        are `OTEL_EXPORTER_OTLP_[SIGNAL_]HEADERS` (case-insensitive); and of
        each such value, every piece between `,` `;` `:` `=` and whitespace
        of at least 16 characters (the keys of `KEY_ID:BASE64,...`, the
        tokens of `name:token` lines).
    """
    env = os.environ if environ is None else environ
    found: list[str] = []
    for name, value in env.items():
        if not _SECRET_NAME.search(name) or len(value) < _MIN_SECRET_CHARS:
            continue
        found.append(value)
        found += [p for p in _PIECES.split(value) if len(p) >= _MIN_PIECE_CHARS and p != value]
    return found


def key_forms(key: bytes) -> list[str]:
    """The ways a binary key appears in text: standard and URL-safe base64, hex.

    Returns:
        The forms of at least 6 characters (all of them for keys of 4 bytes
        or more), with and without `=` padding.
    """
    forms = {
        base64.b64encode(key).decode(),
        base64.urlsafe_b64encode(key).decode(),
        key.hex(),
    }
    forms |= {f.rstrip("=") for f in forms}
    return sorted(f for f in forms if len(f) >= _MIN_SECRET_CHARS)


class Redactor:
    """Replaces secrets in text with `[redacted]` and bounds its length.

    Args:
        secrets: Values to remove wherever they appear, as given or
            URL-encoded (values shorter than 6 characters are ignored).
        max_chars: Longest text returned (default `DEFAULT_MAX_CHARS`); longer
            text is cut and says how much was dropped.

    Example:
        ```python
        redact = Redactor(["hunter2-secret"])
        redact("GET https://ana:pw@x.io?token=abc123 failed: hunter2-secret")
        # 'GET https://[redacted]@x.io?token=[redacted] failed: [redacted]'
        ```
    """

    def __init__(self, secrets: Iterable[str] = (), *, max_chars: int = DEFAULT_MAX_CHARS) -> None:
        given = {s for s in secrets if len(s) >= _MIN_SECRET_CHARS}
        encoded = {quote(s, safe="") for s in given} | {quote_plus(s, safe="") for s in given}
        kept = sorted(given | encoded, key=len, reverse=True)
        self._secrets = re.compile("|".join(re.escape(s) for s in kept)) if kept else None
        self.max_chars = max_chars

    @classmethod
    def from_environment(
        cls, extra: Iterable[str] = (), *, max_chars: int = DEFAULT_MAX_CHARS
    ) -> Redactor:
        """A redactor for `secret_env_values()` plus `extra` secrets."""
        return cls([*secret_env_values(), *extra], max_chars=max_chars)

    def scrub(self, text: str) -> str:
        """`text` with every known secret and credential shape replaced, not truncated."""
        if self._secrets is not None:
            text = self._secrets.sub(REDACTED, text)
        named = _NAME_HINT.search(text) is not None
        for pattern, keep in _PATTERNS:
            if named or pattern not in _NAMED:
                text = pattern.sub(lambda m, keep=keep: m.expand(keep) + REDACTED, text)
        return text

    def __call__(self, text: str) -> str:
        """`text` with every known secret and credential shape replaced, then truncated.

        Only what is kept is scrubbed, and `_SCRUB_MARGIN` characters past it,
        so a secret across the cut goes too (a 3 MB provider error took
        6 s to scrub whole, for the 2,000 characters kept).
        """
        if len(text) > self.max_chars + _SCRUB_MARGIN:
            dropped = len(text) - self.max_chars
            kept = self.scrub(text[: self.max_chars + _SCRUB_MARGIN])[: self.max_chars]
            return f"{kept}… ({dropped} more characters in the worker log)"
        text = self.scrub(text)
        if len(text) > self.max_chars:
            dropped = len(text) - self.max_chars
            text = f"{text[: self.max_chars]}… ({dropped} more characters in the worker log)"
        return text


_registered: set[str] = set()
_worker: tuple[tuple[str, ...], Redactor] | None = None
_lock = threading.Lock()


def register_secrets(values: Iterable[str]) -> None:
    """Add secrets `worker_redactor()` removes from now on (for the process's lifetime).

    `DurableToolsPlugin` registers those of its app: MCP servers' tokens,
    headers and `env`, and the decision keys (`key_forms`).

    Args:
        values: The secrets (values shorter than 6 characters are ignored).
    """
    with _lock:
        _registered.update(v for v in values if len(v) >= _MIN_SECRET_CHARS)


def worker_redactor() -> Redactor:
    """The process's redactor: `secret_env_values()` as they are now, and the registered secrets.

    It is made again only when those change, so spans and log records can
    call this for each one (about 20 µs: the environment is read each time).
    """
    global _worker
    with _lock:
        key = (*secret_env_values(), "\0", *sorted(_registered))
        if _worker is None or _worker[0] != key:
            _worker = (key, Redactor(s for s in key if s != "\0"))
        return _worker[1]

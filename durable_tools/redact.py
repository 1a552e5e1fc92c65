"""Scrub secrets out of failure text before it reaches history or the model.

Exception messages carry what the code that raised them had at hand: URLs with
credentials, bearer tokens, API keys in query strings, file paths. A tool's or
a model's failure text is recorded in workflow history (Temporal stores it, the
Web UI shows it) and shown to the model, so the worker passes it through a
`Redactor` first:

1. the values of secrets the worker knows (environment variables whose names
   say secret: `*API_KEY*`, `*TOKEN*`, `*SECRET*`, `*PASSWORD*`,
   `*CREDENTIAL*`; MCP servers' tokens, headers and `env`), longest first;
2. credential shapes: URL user-info (`https://user:pass@host`), `Bearer …` /
   `Basic …`, `token=…` / `api_key=…` / `password=…` assignments and `?key=…` in URLs, and
   well-known key formats (`sk-…`, `ghp_…`, `xox?-…`, `AKIA…`); an assignment
   whose whole value is the placeholder `...` or `…` is a hint, not a
   secret, and stays (`pass api_key=... to OpenAIChatModel`);
3. truncation to `max_chars` (default 2,000), so a failure always fits
   Temporal's failure size limit.

Each match becomes `[redacted]`. The full text stays in the worker's log.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Final

__all__ = ["DEFAULT_MAX_CHARS", "REDACTED", "Redactor", "secret_env_values"]

REDACTED: Final[str] = "[redacted]"

DEFAULT_MAX_CHARS: Final[int] = 2_000
"""Longest failure text kept, in characters (Temporal's failure limit is far larger)."""

_MIN_SECRET_CHARS: Final[int] = 6
"""Shorter values are not treated as secrets (they would redact ordinary words)."""

_SECRET_NAME: Final[re.Pattern[str]] = re.compile(
    r"api[_-]?key|token|secret|passw(or)?d|credential|private[_-]?key", re.IGNORECASE
)

_PATTERNS: Final[tuple[tuple[re.Pattern[str], str], ...]] = (
    # https://user:password@host -> https://[redacted]@host
    (re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)[^/\s:@]+:[^/\s@]+(?=@)"), r"\g<scheme>"),
    # Authorization: Bearer xyz / Basic xyz
    (re.compile(r"(?i)\b(?P<scheme>bearer|basic|token)\s+[A-Za-z0-9._~+/=-]{8,}"), r"\g<scheme> "),
    # token=abc, api_key: "abc", password=abc; not a placeholder such as the
    # `pass api_key=...` of a hint, which would read `pass api_key=[redacted]`.
    (
        re.compile(
            r"""(?ix)
            (?P<scheme>\b[\w-]*(?:token|secret|passw(?:or)?d|api[_-]?key|apikey|access[_-]?key
                |client[_-]?secret|signature|sig|auth)["']?\s*[=:]\s*["']?)
            (?!(?:\.{3}|…)(?:[\s&"',;)}\]]|$))
            [^\s&"',;)}\]]+
            """
        ),
        r"\g<scheme>",
    ),
    # ?key=... in a URL's query (Google-style API keys).
    (re.compile(r"(?i)(?P<scheme>[?&]key=)[^&\s\"'#]+"), r"\g<scheme>"),
    # Well-known key formats.
    (re.compile(r"\b(?P<scheme>)(?:sk|rk|pk)-[A-Za-z0-9_-]{16,}"), r"\g<scheme>"),
    (re.compile(r"\b(?P<scheme>)gh[pousr]_[A-Za-z0-9]{20,}"), r"\g<scheme>"),
    (re.compile(r"\b(?P<scheme>)xox[abposr]-[A-Za-z0-9-]{10,}"), r"\g<scheme>"),
    (re.compile(r"\b(?P<scheme>)(?:AKIA|ASIA)[0-9A-Z]{16}\b"), r"\g<scheme>"),
)


def secret_env_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """Values of environment variables whose names say they hold secrets.

    Args:
        environ: The environment (default `os.environ`).

    Returns:
        The values of at least 6 characters whose variable names match
        `api_key`, `token`, `secret`, `password`, `credential` or
        `private_key` (case-insensitive).
    """
    env = os.environ if environ is None else environ
    return [
        value
        for name, value in env.items()
        if _SECRET_NAME.search(name) and len(value) >= _MIN_SECRET_CHARS
    ]


class Redactor:
    """Replaces secrets in text with `[redacted]` and bounds its length.

    Args:
        secrets: Values to remove wherever they appear (values shorter than 6
            characters are ignored).
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
        kept = sorted({s for s in secrets if len(s) >= _MIN_SECRET_CHARS}, key=len, reverse=True)
        self._secrets = re.compile("|".join(re.escape(s) for s in kept)) if kept else None
        self.max_chars = max_chars

    @classmethod
    def from_environment(
        cls, extra: Iterable[str] = (), *, max_chars: int = DEFAULT_MAX_CHARS
    ) -> Redactor:
        """A redactor for `secret_env_values()` plus `extra` secrets."""
        return cls([*secret_env_values(), *extra], max_chars=max_chars)

    def __call__(self, text: str) -> str:
        """`text` with every known secret and credential shape replaced, then truncated."""
        if self._secrets is not None:
            text = self._secrets.sub(REDACTED, text)
        for pattern, keep in _PATTERNS:
            text = pattern.sub(lambda m, keep=keep: m.expand(keep) + REDACTED, text)
        if len(text) > self.max_chars:
            dropped = len(text) - self.max_chars
            text = f"{text[: self.max_chars]}… ({dropped} more characters in the worker log)"
        return text

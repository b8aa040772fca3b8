"""The one redaction function every outward path goes through (responses, CLI, logs, events)."""

from __future__ import annotations

import re
from typing import Any

REDACTED = "[redacted]"

_URL_CREDENTIALS = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)[^/\s:@]*:[^/\s@]*@")
_URL_USER_TOKEN = re.compile(r"(?P<scheme>https?://)[^/\s:@]{16,}@")
_KEY_VALUE_SECRET = re.compile(
    r"(?i)\b(?P<key>password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key|auth)"
    r"(?P<sep>\s*[=:]\s*)(?P<quote>['\"]?)[^\s'\"&;,]+"
)
_BEARER = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}")
_KNOWN_TOKENS = re.compile(
    r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|glpat-[A-Za-z0-9_-]{20,}"
    r"|xox[abpors]-[A-Za-z0-9-]{10,}|sk-[A-Za-z0-9_-]{16,}|AKIA[0-9A-Z]{16}"
    r"|eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,})"
)
# Long opaque mixed-case/digit strings look like tokens; pure hex (hashes, commit ids) does not.
_OPAQUE = re.compile(r"\b(?=[A-Za-z0-9_\-+/]*[0-9])(?=[A-Za-z0-9_\-+/]*[A-Z])"
                     r"(?=[A-Za-z0-9_\-+/]*[a-z])[A-Za-z0-9_\-+/]{32,}={0,2}")


def redact_text(text: str) -> str:
    """Remove URL credentials, connection-string passwords and token-shaped values from text."""
    text = _URL_CREDENTIALS.sub(lambda m: f"{m['scheme']}{REDACTED}@", text)
    text = _URL_USER_TOKEN.sub(lambda m: f"{m['scheme']}{REDACTED}@", text)
    text = _KEY_VALUE_SECRET.sub(
        lambda m: f"{m['key']}{m['sep']}{m['quote']}{REDACTED}", text
    )
    text = _BEARER.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
    text = _KNOWN_TOKENS.sub(REDACTED, text)
    return _OPAQUE.sub(REDACTED, text)


_SECRET_KEY = re.compile(r"(?i)^(password|passwd|secret|token|api[_-]?key|access[_-]?key"
                         r"|private[_-]?key|client[_-]?secret|credentials?)$")


def redact(value: Any) -> Any:
    """Redact every string inside a JSON-like value; values under secret-named keys go whole."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {
            key: REDACTED if _SECRET_KEY.match(str(key)) and value_is_set(item) else redact(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [redact(item) for item in value]
    return value


def value_is_set(value: Any) -> bool:
    """True for a value that could carry a secret (not None, not empty)."""
    return value not in (None, "", [], {})

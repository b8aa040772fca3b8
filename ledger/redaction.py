"""The pattern net every outward path goes through (responses, CLI, logs, events).

The runner masks every secret value it projected by value first
(:mod:`runner_assembly.runner.masking`); this is the second net, for secrets it never saw. It
only cuts shapes that are credentials: URL userinfo with a password, ``*_TOKEN=``-style
pairs, JSON ``"token": "..."`` pairs, bearer/basic credentials, private-key blocks and known
token prefixes. Ordinary identifiers and paths pass unchanged. Every pattern is compiled
with RE2, so a pass is linear in the text, whatever the text holds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Protocol, overload

import re2

REDACTED = "[redacted]"
_KEY_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-"

_OPTIONS = re2.Options()
_OPTIONS.max_mem = 64 << 20


class RE2Match(Protocol):
    """What the code reads of an RE2 match over bytes (the binding ships no types)."""

    def __getitem__(self, group: int) -> bytes: ...
    def start(self) -> int: ...
    def end(self) -> int: ...


class RE2Pattern(Protocol):
    """What the code calls on an RE2 pattern compiled for bytes."""

    pattern: bytes

    def search(self, text: bytes) -> RE2Match | None: ...
    def fullmatch(self, text: bytes) -> RE2Match | None: ...
    def finditer(self, text: bytes) -> Iterator[RE2Match]: ...
    def sub(self, replace: bytes | Callable[[RE2Match], bytes], text: bytes) -> bytes: ...


def _compile(pattern: str, options: re2.Options = _OPTIONS) -> RE2Pattern:
    """Compiled for UTF-8 bytes: the str path of the binding costs more per match."""
    compiled: RE2Pattern = re2.compile(pattern.encode(), options)
    return compiled


_URL_CREDENTIALS = _compile(r"[a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@]*:[^/\s]*@")
"""``scheme://user:password@``: greedy up to the last ``@``, so a password may hold ``@``
(no capture group: RE2 then needs only its DFA, however long the match)."""
_URL_USER_TOKEN = _compile(r"https?://[^/\s:@]{16,}@")
_SECRET_WORD = (r"(?:token|secret|password|passwd|pwd|api[_-]?key|access[_-]?key"
                r"|private[_-]?key|credentials?|[_-]key)")
_KEY_VALUE_SECRET = _compile(
    r"(?i)[a-z0-9_.-]*" + _SECRET_WORD + r"\\?[\"']?\s*[=:]\s*"
    r"(?:\"(?:[^\"\\\n]|\\.)*\"|\\\"(?:[^\"\\]|\\[^\"])*\\\"|'[^']*'"
    r"|[\"']?[^\s'\"&;,}]+)"
)
"""``GH_TOKEN=v``, ``password: v``, ``"api_key": "v"`` (also JSON inside a JSON string).
No capture groups (RE2 then needs only its DFA); the match is taken apart in Python."""
_AUTH_SCHEME = _compile(r"(?i)\b(?:bearer|basic|token)\s+[A-Za-z0-9._~+/=-]{8,}")
_KNOWN_TOKENS_PATTERN = "|".join((
    r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}",  # GitHub classic, OAuth, user, server, refresh
    r"github_pat_[A-Za-z0-9_]{20,}",  # GitHub fine-grained
    r"gl(?:pat|dt|rt|ptt|ft|soat|cbt)-[A-Za-z0-9_-]{20,}",  # GitLab personal, deploy, runner…
    r"xox[abposre]-[A-Za-z0-9-]{10,}|xapp-[0-9]-[A-Za-z0-9-]{10,}",  # Slack tokens
    r"hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/+-]{16,}",  # webhooks
    r"sk-[A-Za-z0-9_-]{16,}",  # OpenAI-style
    r"(?:AKIA|ASIA)[0-9A-Z]{16}",  # AWS access key ids, long-lived and temporary
    r"AIza[0-9A-Za-z_-]{35}",  # Google API keys
    r"(?:sk|rk)_(?:live|test)_[0-9A-Za-z]{16,}",  # Stripe secret and restricted keys
    r"npm_[A-Za-z0-9]{36}",  # npm access tokens
    r"pypi-AgE[A-Za-z0-9_-]{50,}",  # PyPI API tokens (a macaroon)
    r"svck_[A-Za-z0-9_-]{20,}",  # this service's own API keys
    r"eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,})",  # JWTs
))
_KNOWN_TOKENS = _compile(_KNOWN_TOKENS_PATTERN)
_PRIVATE_KEY_BEGIN = r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----"
_PRIVATE_KEY = _compile(r"(?s)" + _PRIVATE_KEY_BEGIN + r".*?(?:-----END [A-Z0-9 ]*"
                        r"PRIVATE KEY-----|\z)")
_CREDENTIAL = _compile(
    "|".join(f"(?:{p})" for p in (
        _PRIVATE_KEY_BEGIN,
        r"[a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@]*:[^/\s@][^/\s]*@",
        _KNOWN_TOKENS_PATTERN)))
"""The high-confidence credentials intake refuses (DESIGN 8): the same token prefixes and
private-key header as the net, and URL userinfo with a non-empty password."""
_SECRET_KEY = _compile(r"(?i)(?:password|passwd|secret|token|api[_-]?key|access[_-]?key"
                       r"|private[_-]?key|client[_-]?secret|credentials?)")


def holds_credential(text: str) -> bool:
    """True when ``text`` holds a high-confidence credential (linear: one RE2 search)."""
    return bool(text) and _CREDENTIAL.search(text.encode(errors="surrogatepass")) is not None


def _userinfo(text: str) -> str:
    scheme = text.split("://", 1)[0]
    return f"{scheme}://{REDACTED}@"


def _key_value(text: str) -> str:
    after_key = text.lstrip(_KEY_CHARS)
    after_close = after_key[2:] if after_key.startswith('\\"') else (
        after_key[1:] if after_key[:1] in "\"'" else after_key)
    value = after_close.lstrip().lstrip("=:").lstrip()
    head = text[:len(text) - len(value)]
    quote = value[:2] if value.startswith('\\"') else value[:1] if value[:1] in "\"'" else ""
    closing = quote if len(value) > 2 * len(quote) and value.endswith(quote) else ""
    return f"{head}{quote}{REDACTED}{closing}"


def _auth_scheme(text: str) -> str:
    scheme, value = text.split(None, 1)
    if value.isalpha():
        return text  # a word after "basic"/"token" (no digit or symbol): not a secret
    return f"{scheme} {REDACTED}"


def redact_text(text: str) -> str:
    """Cut credential-shaped values (see the module docstring) from ``text``."""
    if not text:
        return text
    data = text.encode(errors="surrogatepass")
    if len(data) <= SHORTCUT_MAX_BYTES and _ANY_PASS.search(data) is None:
        return str(text)  # no pass would cut anything: each would leave it as it is
    for pattern, replace in _PASSES:
        data = pattern.sub(replace, data)
    return str(data.decode(errors="surrogatepass"))


def _using(rewrite: Callable[[str], str]) -> Callable[[RE2Match], bytes]:
    return lambda match: rewrite(match[0].decode(errors="surrogatepass")).encode(
        errors="surrogatepass")


_PASSES: tuple[tuple[RE2Pattern, Callable[[RE2Match], bytes]], ...] = (
    (_PRIVATE_KEY, lambda _: REDACTED.encode()),
    (_URL_CREDENTIALS, _using(_userinfo)),
    (_URL_USER_TOKEN, _using(_userinfo)),
    (_KEY_VALUE_SECRET, _using(_key_value)),
    (_AUTH_SCHEME, _using(_auth_scheme)),
    (_KNOWN_TOKENS, lambda _: REDACTED.encode()),
)


def joined(patterns: Iterable[RE2Pattern]) -> str:
    """One pattern that finds what any of ``patterns`` finds (RE2 keeps an inline flag such
    as ``(?i)`` to the group it opens)."""
    return "|".join(f"(?:{pattern.pattern.decode()})" for pattern in patterns)


_QUIET = re2.Options()
_QUIET.max_mem = _OPTIONS.max_mem
_QUIET.log_errors = False  # RE2's own stderr line when its DFA falls back to the NFA
_ANY_PASS = _compile(joined(pattern for pattern, _ in _PASSES), _QUIET)
"""Every pass's pattern in one: a text it does not find is one no pass changes (each pass
finds nothing in what the one before left unchanged), so a short clean line costs one
search, not six substitutions."""
SHORTCUT_MAX_BYTES = 8 * 1024
"""The longest text searched with :data:`_ANY_PASS` first. On long crafted text (a mebibyte
of near-miss tokens) the joined pattern's DFA outgrows its memory and RE2 falls back to a
slower engine: ten times the six passes, so a long text goes to them directly."""


@overload
def redact(value: dict[str, object]) -> dict[str, object]: ...
@overload
def redact(value: object) -> object: ...
def redact(value: object) -> object:
    """Redact every string inside a JSON-like value; values under secret-named keys go whole."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {
            key: REDACTED if _secret_key(str(key)) and value_is_set(item) else redact(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [redact(item) for item in value]
    return value


def _secret_key(key: str) -> bool:
    return _SECRET_KEY.fullmatch(key.encode(errors="surrogatepass")) is not None


def value_is_set(value: object) -> bool:
    """True for a value that could carry a secret (not None, not empty)."""
    return value not in (None, "", [], {})

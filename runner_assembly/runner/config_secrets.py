"""The secret values inside a backend's configuration file (DESIGN 8, docs/decisions.md).

A credential file (``auth.json``, a tool or repository secret) is secret through and
through: every line and string of it is a mask. A configuration file (``config.toml``,
``model-catalog.json``) is mostly ordinary text -- model names, provider names, endpoints --
that the backend prints all the time; masking it would make the output unreadable while
hiding nothing. Only its credential-like values are masks: the strings under a key whose
name holds ``key``, ``token``, ``secret``, ``password``, ``auth``, ``credential``, ``cookie``
or ``header`` (a headers table: every value in it), and the userinfo of any URL.
"""

from __future__ import annotations

import json
import re
import tomllib
from urllib.parse import unquote, urlsplit

CONFIGURATION_FILES = frozenset({"config.toml", "model-catalog.json"})
"""Secret keys that are configuration files: only their credential-like values are masks."""
CREDENTIAL_KEY = re.compile(r"key|token|secret|passw|auth|credential|cookie|header",
                            re.IGNORECASE)
"""A key whose values are credentials (``api_key``, ``http_headers``, ``bearer_token``…)."""


def credential_strings(content: str) -> list[str] | None:
    """The credential-like strings of a JSON or TOML configuration ``content`` (values under
    credential-like keys, URL userinfo), or None when it is neither (then it is a
    credential file for the caller: all of it is masked)."""
    try:
        document: object = json.loads(content)
    except ValueError:
        try:
            document = tomllib.loads(content)
        except ValueError:
            return None
    found: list[str] = []
    stack: list[tuple[object, bool]] = [(document, False)]
    while stack:
        item, secret = stack.pop()
        if isinstance(item, str):
            found += [item] if secret else []
            found += _userinfo(item)
        elif isinstance(item, dict):
            stack += [(value, secret or CREDENTIAL_KEY.search(str(key)) is not None)
                      for key, value in item.items()]
        elif isinstance(item, list):
            stack += [(value, secret) for value in item]
    return found


def _userinfo(text: str) -> list[str]:
    """The userinfo of ``text`` when it is a URL with one: the whole of it, the password,
    and both decoded."""
    if "@" not in text or "://" not in text:
        return []
    try:
        netloc = urlsplit(text.strip()).netloc
    except ValueError:
        return []
    userinfo, at, _host = netloc.rpartition("@")
    if not at or not userinfo:
        return []
    password = userinfo.partition(":")[2]
    return [value for value in {userinfo, unquote(userinfo), password, unquote(password)}
            if value]

"""Prefixed, time-sortable identifiers (ULID body, Crockford base32)."""

from __future__ import annotations

import hashlib
import os
import time

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"
"""Crockford's base32 digits, lower case, in the order of their values."""
_PAIRS = [high + low for high in _ALPHABET for low in _ALPHABET]
"""The two digits of every 10-bit value: an id's 26 digits take 13 look-ups."""
_SHIFTS = tuple(range(120, -1, -10))


def _encode130(value: int) -> str:
    """The low 130 bits of ``value`` as 26 Crockford digits, most significant first."""
    return "".join([_PAIRS[(value >> shift) & 1023] for shift in _SHIFTS])


def new_id(prefix: str) -> str:
    """Return a new id such as ``tsk_01j…``: 48-bit milliseconds then 80 random bits."""
    millis = time.time_ns() // 1_000_000
    body = (millis << 80) | int.from_bytes(os.urandom(10), "big")
    return f"{prefix}_{_encode130(body)}"


def keyed_id(prefix: str, *parts: str) -> str:
    """An id derived from ``parts`` (the same parts, the same id): 130 bits of their sha256."""
    digest = hashlib.sha256("\x00".join(parts).encode()).digest()
    return f"{prefix}_{_encode130(int.from_bytes(digest[:17], 'big') >> 6)}"

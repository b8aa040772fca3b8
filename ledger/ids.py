"""Prefixed, time-sortable identifiers (ULID body, Crockford base32)."""

from __future__ import annotations

import hashlib
import os
import time

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def _encode(value: int, length: int) -> str:
    chars = []
    for _ in range(length):
        chars.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(chars))


def new_id(prefix: str) -> str:
    """Return a new id such as ``tsk_01J…``: 48-bit milliseconds then 80 random bits."""
    millis = time.time_ns() // 1_000_000
    body = (millis << 80) | int.from_bytes(os.urandom(10), "big")
    return f"{prefix}_{_encode(body, 26).lower()}"


def keyed_id(prefix: str, *parts: str) -> str:
    """An id derived from ``parts`` (the same parts, the same id): 130 bits of their sha256."""
    digest = hashlib.sha256("\x00".join(parts).encode()).digest()
    return f"{prefix}_{_encode(int.from_bytes(digest[:17], 'big') >> 6, 26).lower()}"

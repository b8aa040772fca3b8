"""Prefixed, time-sortable identifiers (ULID body, Crockford base32)."""

from __future__ import annotations

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

"""Identifiers: Crockford base32 of the right bits, time-sortable, keyed ids stable."""

from __future__ import annotations

import hashlib
import time

from hypothesis import given
from hypothesis import strategies as st

from ledger.ids import _encode130, keyed_id, new_id

CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"


def digit_by_digit(value: int) -> str:
    """The 26 base32 digits of a 130-bit value, one at a time (the plain definition)."""
    return "".join(CROCKFORD[(value >> (5 * (25 - place))) & 31] for place in range(26))


@given(st.integers(min_value=0, max_value=2**130 - 1))
def test_encoding_is_crockford_base32(value: int) -> None:
    assert _encode130(value) == digit_by_digit(value)


def test_keyed_id_is_the_first_130_bits_of_the_sha256() -> None:
    digest = hashlib.sha256(b"acme\x00key-1").digest()
    expected = digit_by_digit(int.from_bytes(digest, "big") >> (256 - 130))
    assert keyed_id("tsk", "acme", "key-1") == f"tsk_{expected}"
    assert keyed_id("tsk", "acme", "key-2") != keyed_id("tsk", "acme", "key-1")


def test_new_ids_carry_their_millisecond_and_sort_by_it() -> None:
    before = time.time_ns() // 1_000_000
    first = new_id("tsk")
    time.sleep(0.002)
    second = new_id("tsk")
    after = time.time_ns() // 1_000_000
    assert first.startswith("tsk_") and len(first) == 4 + 26
    assert set(first[4:]) <= set(CROCKFORD)
    millis = sum(CROCKFORD.index(c) << (5 * (25 - i)) for i, c in enumerate(first[4:])) >> 80
    assert before <= millis <= after
    assert first < second

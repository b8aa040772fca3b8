"""The ledger's hash chain: ``hash = sha256(prev_hash || canonical entry)``."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

import msgspec

GENESIS_HASH = bytes(32)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_header_encoder = msgspec.json.Encoder()


def epoch_micros(moment: datetime) -> int:
    """Microseconds since the Unix epoch, exact for Postgres ``timestamptz`` values."""
    return (moment - _EPOCH) // timedelta(microseconds=1)


def entry_tail(*, stream_type: str, stream_id: str, stream_version: int, event_type: str,
               actor: str, recorded_at: datetime, payload: bytes) -> bytes:
    """What an entry's hash covers after ``[`` and its changeSeq: the rest of its canonical
    header (a JSON array), a newline and ``payload``, the exact stored JSON text. The writer
    sends it so Postgres numbers and chains a batch where the head is (``ledger_advance``)."""
    rest = _header_encoder.encode(
        [stream_type, stream_id, stream_version, event_type, actor, epoch_micros(recorded_at)])
    return b"," + rest[1:] + b"\n" + payload


def chained_hash(prev_hash: bytes, change_seq: int, tail: bytes) -> bytes:
    """``sha256(prev_hash || '[' || change_seq || tail)``: an entry's hash."""
    digest = hashlib.sha256(prev_hash)
    digest.update(b"[%d" % change_seq)
    digest.update(tail)
    return digest.digest()


def entry_hash(
    prev_hash: bytes,
    *,
    change_seq: int,
    stream_type: str,
    stream_id: str,
    stream_version: int,
    event_type: str,
    actor: str,
    recorded_at: datetime,
    payload: bytes,
) -> bytes:
    """Hash of one entry chained to its predecessor: ``sha256(prev_hash || header || "\\n" ||
    payload)``, the header being the JSON array of its changeSeq, stream type, stream id,
    version, event type, actor and time (microseconds)."""
    return chained_hash(prev_hash, change_seq, entry_tail(
        stream_type=stream_type, stream_id=stream_id, stream_version=stream_version,
        event_type=event_type, actor=actor, recorded_at=recorded_at, payload=payload))

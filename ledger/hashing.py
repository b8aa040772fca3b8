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
    """Hash of one entry chained to its predecessor; ``payload`` is the exact stored JSON text."""
    header = _header_encoder.encode(
        [change_seq, stream_type, stream_id, stream_version, event_type, actor,
         epoch_micros(recorded_at)]
    )
    digest = hashlib.sha256(prev_hash)
    digest.update(header)
    digest.update(b"\n")
    digest.update(payload)
    return digest.digest()

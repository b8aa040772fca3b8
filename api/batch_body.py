"""The body of a batch submit, read item by item: each task passes the submit's own checks
(strings, the assembly gate, the wire types), and the first item refused names its index
(``details.index``), so the whole batch is refused before anything is stored."""

from __future__ import annotations

import asyncio

import msgspec
from litestar import Request
from litestar.datastructures import State

from api import wire
from api.body import THREAD_BODY_BYTES, body_bytes, decode
from ledger.errors import DomainError, InvalidRequest
from runner_assembly.assembly import model as assembly

BatchTasks = list[tuple[str, wire.SubmitBody]]
"""Each item's idempotency key and task, in the order sent."""

_envelope = msgspec.json.Decoder(wire.BatchEnvelope)
_key = msgspec.json.Decoder(wire.BatchKey)


def decode_batch(raw: bytes, policy: object = None) -> BatchTasks:
    """The items of a batch body, or the refusal of the first bad one with its index."""
    try:
        envelope = _envelope.decode(raw)
    except msgspec.ValidationError as error:
        raise InvalidRequest(f"invalid body: {error}") from None
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
        raise InvalidRequest("body is not valid JSON") from None
    tasks: BatchTasks = []
    for index, raw_item in enumerate(envelope.items):
        try:
            tasks.append(_item(raw_item, policy))
        except DomainError as refusal:
            refusal.details["index"] = index
            raise
    return tasks


def _item(raw: msgspec.Raw, policy: object) -> tuple[str, wire.SubmitBody]:
    try:
        item = _key.decode(raw)
    except msgspec.ValidationError as error:
        raise InvalidRequest(f"invalid item: {error}") from None
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
        raise InvalidRequest("item is not valid JSON") from None
    task = decode(bytes(item.task), wire.SubmitBody, empty_ok=False, gate=assembly.gate,
                  policy=policy)
    return item.idempotency_key, task


async def read_batch(request: Request[object, object, State]) -> BatchTasks:
    """Read and check a batch body (a large one in a worker thread, off the event loop)."""
    raw = await body_bytes(request)
    policy = request.app.state.get("gate_policy")
    if len(raw) > THREAD_BODY_BYTES:
        return await asyncio.to_thread(decode_batch, raw, policy)
    return decode_batch(raw, policy)

"""Turns a validated submit contract into a ``SubmitTask`` command, stored as sent."""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec

from ledger.ids import keyed_id, new_id
from ledger.task import SubmitTask

DEFAULT_LANE = "default"
_canonical = msgspec.json.Encoder(order="sorted")


def payload_hash(contract: dict[str, object]) -> str:
    """sha256 of the canonical JSON (sorted keys, no spaces) of a contract."""
    return hashlib.sha256(_canonical.encode(contract)).hexdigest()


def split_queue(queue: str) -> tuple[str, str]:
    """``name/lane`` → (name, lane); a bare name goes to the default lane."""
    name, _, lane = queue.partition("/")
    return name, lane or DEFAULT_LANE


def submit_command(contract: dict[str, Any], *, actor: str,
                   idempotency_key: str | None = None,
                   default_profile: str | None = None) -> SubmitTask:
    """A submit command for a contract already validated against the wire schema.

    The contract is stored as sent (None fields dropped), never rewritten: a body holding a
    credential was refused before it got here (``credential-in-request``). ``payloadHash`` is
    the hash of the stored contract, so it can be verified from the ledger alone. A task
    sent without ``backendProfile`` gets ``default_profile`` as its profile (the one its
    attempts run on), recorded beside the contract, not in it.
    """
    stored = {key: value for key, value in contract.items() if value is not None}
    queue, lane = split_queue(stored["queue"])
    return SubmitTask(
        # Under an idempotency key the id derives from (tenant, key): a second submit under
        # the key addresses the same stream, so the ledger's unique version forbids a twin.
        task_id=keyed_id("tsk", contract["tenantId"], idempotency_key) if idempotency_key
        else new_id("tsk"),
        tenant_id=stored["tenantId"],
        project_id=stored["projectId"],
        queue=queue,
        lane=lane,
        title=stored["title"],
        priority=int(stored.get("priority", 50)),
        backend_profile=stored.get("backendProfile") or default_profile,
        contract=stored,
        payload_hash=payload_hash(stored),
        creator=actor,
        idempotency_key=idempotency_key,
    )

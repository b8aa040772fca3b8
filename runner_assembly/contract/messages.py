"""The runner protocol's messages (DESIGN 9): what a runner job sends and is answered.

The manager's routes decode these bodies (:mod:`api.runner_wire` re-exports them) and the
runner's client (:mod:`runner_assembly.runner.manager_client`) encodes them: one type per
message on both sides.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

Channel = Literal["output", "trace"]
Stream = Literal["stdout", "stderr"]
"""Which of the backend's streams an output line came from."""
MAX_BATCH_LINES = 1000
MAX_LINE_BYTES = 64 * 1024
MAX_ASSEMBLY_BYTES = 64 * 1024
"""The assembly event is bounded: names, paths and hashes, never contents."""
ThreadId = Annotated[str, Meta(min_length=1, max_length=128,
                               pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]*$")]
ExitState = Literal["completed", "failed", "blocked", "cancelled"]
IDENTIFIER_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@-]*$"
Identifier = Annotated[str, Meta(min_length=1, max_length=128, pattern=IDENTIFIER_PATTERN)]
Bytes = Annotated[int, Meta(ge=0, le=2**63 - 1)]
Files = Annotated[int, Meta(ge=0, le=2**31 - 1)]
"""The widths of the columns that store them (bigint, integer)."""
RFC3339 = (r"^[1-9][0-9]{3}-((0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])|(0[13-9]|1[0-2])-(29|30)"
           r"|(0[13578]|1[02])-31)T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,6})?"
           r"(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$")
"""Timestamps the decoder accepts, for the OpenAPI document (a subset: no 29 February)."""
Timestamp = Annotated[datetime, Meta(extra_json_schema={"pattern": RFC3339})]


class Message(msgspec.Struct, rename="camel", forbid_unknown_fields=True, frozen=True):
    """Base of the runner's messages: camelCase names, unknown fields refused."""


class ClaimBody(Message, frozen=True):
    """Claim the job's start; ``claimant`` names this runner process (random, per start)."""

    claimant: Annotated[str, Meta(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")]
    startup: dict[str, Any] | None = None
    """The runner's startup event (SPEC 2.11): only its summary fields are kept, bounded."""


class LinePart(Message, frozen=True):
    """Part ``part`` of ``parts`` of one line longer than :data:`MAX_LINE_BYTES`: the parts,
    concatenated in order, are the line."""

    text: Annotated[str, Meta(max_length=MAX_LINE_BYTES)]
    part: Annotated[int, Meta(ge=1, le=2**31 - 1)]
    parts: Annotated[int, Meta(ge=2, le=2**31 - 1)]


class LinesBody(Message, frozen=True, omit_defaults=True):
    """Batch number ``seq`` (1, 2, … per channel and stream) of a job's output or trace
    lines; a line is a string, or a :class:`LinePart` of a longer one. ``stream``: the
    backend's stream of an output batch (a trace batch is ``stdout``)."""

    channel: Channel
    seq: Annotated[int, Meta(ge=1, le=2**62)]
    lines: Annotated[list[Annotated[str, Meta(max_length=MAX_LINE_BYTES)] | LinePart],
                     Meta(max_length=MAX_BATCH_LINES)]
    stream: Stream = "stdout"


class AssemblyBody(Message, frozen=True):
    """The bounded assembly event (SPEC 6)."""

    assembly: dict[str, Any]


class ThreadBody(Message, frozen=True):
    """The thread the backend started or resumed."""

    thread_id: ThreadId
    mode: Literal["start", "resume"]


class HeartbeatBody(Message, frozen=True):
    """A heartbeat (no fields)."""


MAX_TOKENS = 2**53 - 1
"""A token count is a whole number up to 2^53 - 1 (exact in every JSON reader)."""
Tokens = Annotated[int, Meta(ge=0, le=MAX_TOKENS)]


class Usage(Message, frozen=True):
    """The backend's token usage (docs/backends.md: Codex's ``turn.completed`` counts); a
    count it did not report is 0, any other field is refused."""

    input_tokens: Tokens = 0
    cached_input_tokens: Tokens = 0
    output_tokens: Tokens = 0
    reasoning_output_tokens: Tokens = 0


class ExitBody(Message, frozen=True):
    """How the job ended, as its runner saw it."""

    state: ExitState
    exit_code: int | None = None
    failure_kind: Annotated[str, Meta(max_length=64, pattern=r"^[a-z0-9-]+$")] | None = None
    failure_message: Annotated[str, Meta(max_length=4000)] | None = None
    started_at: Timestamp | None = None
    finished_at: Timestamp | None = None
    """When the backend (or, when none ran, the runner's work) started and ended: the
    attempt's real duration, whenever it is refreshed."""
    usage: Usage | None = None
    """The token usage the backend reported, if any."""


class ClaimAnswer(msgspec.Struct, rename="camel", frozen=True):
    """``start``: true for the first claimant only; any other runner exits without starting
    the backend."""

    runner_job_id: str
    start: bool


class Ack(msgspec.Struct, rename="camel", frozen=True):
    """A report was recorded (``accepted``) or had been already (false: a resend)."""

    runner_job_id: str
    accepted: bool


class HeartbeatAnswer(msgspec.Struct, rename="camel", frozen=True):
    """The lease was renewed for ``leaseSeconds``."""

    runner_job_id: str
    lease_seconds: float


class StorageSummaryBody(Message, frozen=True):
    """Body of ``POST …/storage/refresh`` as a runner writes it back (may be empty)."""

    storage_size_bytes: Bytes
    storage_files_count: Files
    storage_sha256: Annotated[str, Meta(pattern=r"^[0-9a-f]{64}$")]
    pvc_name: Identifier | None = None
    pvc_phase: Annotated[str, Meta(max_length=32, pattern=r"^[A-Za-z]+$")] | None = None
    storage_updated_at: Timestamp | None = None

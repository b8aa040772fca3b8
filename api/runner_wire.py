"""Wire types of the runner protocol (DESIGN 9): what a runner job sends and is answered.

Defined once in :mod:`runner_assembly.contract.messages`, which the runner's client encodes
too; re-exported here for the routes.
"""

from __future__ import annotations

from runner_assembly.contract.messages import (
    MAX_ASSEMBLY_BYTES,
    MAX_BATCH_LINES,
    MAX_LINE_BYTES,
    Ack,
    AssemblyBody,
    Channel,
    ClaimAnswer,
    ClaimBody,
    ExitBody,
    HeartbeatAnswer,
    HeartbeatBody,
    LinesBody,
    ThreadBody,
)

__all__ = ["MAX_ASSEMBLY_BYTES", "MAX_BATCH_LINES", "MAX_LINE_BYTES", "Ack", "AssemblyBody",
           "Channel", "ClaimAnswer", "ClaimBody", "ExitBody", "HeartbeatAnswer",
           "HeartbeatBody", "LinesBody", "ThreadBody"]

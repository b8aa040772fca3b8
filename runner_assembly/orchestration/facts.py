"""What orchestration reads of a task: its facts (projections) and its decision state
(ledger stream); the failure-message bound every stored failure goes through."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import asyncpg

from ledger.errors import NotFound
from ledger.intake import split_queue
from ledger.redaction import redact_text
from ledger.streams import TASK_STREAM
from ledger.task import TaskState
from projections import orchestration_queries as oq
from runner_assembly.orchestration.session_turns import choose_thread, folded

MAX_FAILURE_MESSAGE = 500


def bounded(message: str) -> str:
    """A failure message as stored: redacted, one line, at most 500 characters."""
    line = " ".join(redact_text(message).split())
    return line if len(line) <= MAX_FAILURE_MESSAGE else line[:MAX_FAILURE_MESSAGE - 1] + "…"


@dataclass(frozen=True)
class TaskFacts:
    """What materialisation needs from a task's projections."""

    task_id: str
    backend_profile: str
    prompt: str
    resource_bundle_ref: dict[str, Any] | None
    session_ref: dict[str, Any] | None
    contract: dict[str, Any]

    @property
    def persistent_session(self) -> bool:
        """Whether the task names a session (``sessionRef``): one with a volume."""
        return isinstance(self.session_ref, dict) and bool(self.session_ref)

    @property
    def queue(self) -> str | None:
        """The task's queue name (its lane left out), if the contract names one."""
        queue = self.contract.get("queue")
        return split_queue(queue)[0] if isinstance(queue, str) else None

    @property
    def tenant_id(self) -> str:
        """The task's tenant."""
        return str(self.contract.get("tenantId", ""))

    @property
    def named_session(self) -> str | None:
        """The session id ``sessionRef`` names, if any."""
        session_id = (self.session_ref or {}).get("sessionId")
        return session_id if isinstance(session_id, str) else None

    @property
    def conversation(self) -> str | None:
        """The conversation id ``sessionRef`` names, if any."""
        conversation = (self.session_ref or {}).get("conversationId")
        return conversation if isinstance(conversation, str) else None

    def conversation_of(self, session_id: str) -> str:
        """The conversation of the task's session: named, else derived from its id."""
        return self.conversation or "cnv_" + session_id.removeprefix("ses_")

    def thread(self, session_thread: str | None) -> str | None:
        """The thread the task's turn resumes (None: it starts one)."""
        payload = self.contract.get("payload") or {}
        return choose_thread(payload.get("threadId"), (self.session_ref or {}).get("threadId"),
                             session_thread, self.persistent_session)


@dataclass(frozen=True)
class TaskReader:
    """Reads a task for orchestration: facts from its projections, state from its stream."""

    pool: asyncpg.Pool
    default_profile: str

    async def facts(self, task_id: str) -> TaskFacts:
        """What materialisation needs to know about a task (``not-found`` without one)."""
        record = await oq.task_facts(self.pool, task_id)
        if record is None:
            raise NotFound(f"task {task_id} not found", taskId=task_id)
        contract = record.contract
        return TaskFacts(task_id, record.backend_profile or self.default_profile,
                         contract["payload"]["prompt"], contract.get("resourceBundleRef"),
                         contract.get("sessionRef"), contract)

    async def state(self, task_id: str) -> TaskState | None:
        """The task's decision state, folded from its ledger stream (None: no task)."""
        state: TaskState | None = await folded(self.pool, TASK_STREAM, task_id)
        return state

"""The runner protocol's service behind its routes: bearer tokens in, ledger commands out."""

from __future__ import annotations

import msgspec

from api import runner_wire as rw
from ledger import session_lines
from ledger.errors import InvalidRequest, Unauthorized
from ledger.events import JobExit, TokenUsage
from ledger.redaction import redact, redact_text
from runner_assembly.assembly.capability import startup_record
from runner_assembly.orchestration.runner_protocol import RunnerProtocol
from runner_assembly.orchestration.session_service import SessionService

BEARER = "bearer "


def bearer(authorization: str | None) -> str:
    """The token of an ``Authorization: Bearer …`` header (refused when there is none)."""
    if not authorization or not authorization.lower().startswith(BEARER):
        raise Unauthorized("a runner token is required (Authorization: Bearer …)")
    token = authorization[len(BEARER):].strip()
    if not token or len(token) > 512:
        raise Unauthorized("runner token refused")
    return token


def _no_nul(value: object) -> None:
    if "\\u0000" in msgspec.json.encode(value).decode():
        raise InvalidRequest("strings must not contain NUL characters")


class RunnerApi:
    """What runner jobs report, as the runner routes answer it."""

    def __init__(self, protocol: RunnerProtocol, sessions: SessionService,
                 lease_s: float) -> None:
        self.protocol = protocol
        self.sessions = sessions
        self.lease_s = lease_s

    async def claim(self, job: str, token: str, body: rw.ClaimBody) -> rw.ClaimAnswer:
        """First claim wins; the answer tells any other runner not to start."""
        return rw.ClaimAnswer(job, await self.protocol.claim(
            job, token, body.claimant, startup_record(body.startup)))

    async def lines(self, job: str, token: str, body: rw.LinesBody) -> rw.Ack:
        """Append a numbered batch of lines (once)."""
        lines = [line if isinstance(line, str)
                 else session_lines.Piece(line.text, line.part, line.parts)
                 for line in body.lines]
        return rw.Ack(job, await self.protocol.lines(job, token, body.channel, body.seq,
                                                     lines, body.stream))

    async def assembly(self, job: str, token: str, body: rw.AssemblyBody) -> rw.Ack:
        """Record the bounded assembly event (redacted by pattern as a second net)."""
        if len(msgspec.json.encode(body.assembly)) > rw.MAX_ASSEMBLY_BYTES:
            raise InvalidRequest(f"the assembly event exceeds {rw.MAX_ASSEMBLY_BYTES} bytes")
        _no_nul(body.assembly)
        await self.protocol.assembly(job, token, redact(body.assembly))
        return rw.Ack(job, True)

    async def thread(self, job: str, token: str, body: rw.ThreadBody) -> rw.Ack:
        """Record the thread the backend started or resumed."""
        await self.protocol.thread(job, token, body.thread_id, body.mode)
        return rw.Ack(job, True)

    async def heartbeat(self, job: str, token: str) -> rw.HeartbeatAnswer:
        """Renew the lease."""
        await self.protocol.heartbeat(job, token)
        return rw.HeartbeatAnswer(job, self.lease_s)

    async def exit(self, job: str, token: str, body: rw.ExitBody) -> rw.Ack:
        """Record the runner's exit."""
        _no_nul(body.failure_message)
        message = redact_text(body.failure_message) if body.failure_message else None
        state = await self.protocol.exit(job, token, JobExit(
            body.state, body.exit_code, body.failure_kind, message,
            started_at=body.started_at.isoformat() if body.started_at else None,
            finished_at=body.finished_at.isoformat() if body.finished_at else None,
            usage=TokenUsage(**msgspec.structs.asdict(body.usage)) if body.usage
            else msgspec.UNSET))
        await self.sessions.sync(state.session_id)  # the turn ends now, not at the next poll
        return rw.Ack(job, True)

    async def check_session(self, session_id: str, authorization: str | None) -> None:
        """With a runner token, refuse one that is not of a live job of ``session_id``."""
        if authorization is not None:
            await self.protocol.session_job(session_id, bearer(authorization))

"""The runner protocol (DESIGN 9, docs/runner-protocol.md): what a runner job reports.

Every route takes the job's bearer token (``Authorization: Bearer …``); a token of another
job, of an ended job, or none is refused with 401 ``unauthorized`` and changes nothing.
"""

from __future__ import annotations

from typing import TypeVar

from litestar import Controller
from litestar.openapi import ResponseSpec

from api import examples
from api import runner_wire as rw
from api.access import RUNNER_ONLY
from api.body import decode_runner_body
from api.errors import error_responses
from api.openapi import command
from api.params import HttpRequest, RunnerDep, SessionId
from api.runner_service import RunnerApi, bearer

T = TypeVar("T")
RUNNER_ERRORS: dict[int, ResponseSpec] = error_responses(400, 401, 409, 413, 503)


async def _read(request: HttpRequest, kind: type[T], empty_ok: bool = False) -> tuple[str, T]:
    body = decode_runner_body(await request.body(), kind, empty_ok=empty_ok)
    return bearer(request.headers.get("authorization")), body


async def take_lines(runner_api: RunnerApi, runner_job_id: str, authorization: str | None,
                     raw: bytes) -> rw.Ack:
    """A batch of lines as the route takes it: the body decoded, then the token checked."""
    body = decode_runner_body(raw, rw.LinesBody)
    return await runner_api.lines(runner_job_id, bearer(authorization), body)


async def take_heartbeat(runner_api: RunnerApi, runner_job_id: str,
                         authorization: str | None, raw: bytes) -> rw.HeartbeatAnswer:
    """A heartbeat as the route takes it: the body (empty or ``{}``), then the token."""
    decode_runner_body(raw, rw.HeartbeatBody, empty_ok=True)
    return await runner_api.heartbeat(runner_job_id, bearer(authorization))


class RunnerController(Controller):
    """Messages of one runner job."""

    path = "/api/v1/runner/jobs/{runner_job_id:str}"
    tags = ("runner",)
    opt = RUNNER_ONLY

    @command("/claim", rw.ClaimBody, examples.RUNNER_CLAIM, RUNNER_ERRORS)
    async def claim_job(self, request: HttpRequest, runner_api: RunnerDep,
                    runner_job_id: SessionId) -> rw.ClaimAnswer:
        """Claim the job's start: ``start`` is true for the first claimant only."""
        token, body = await _read(request, rw.ClaimBody)
        return await runner_api.claim(runner_job_id, token, body)

    @command("/lines", rw.LinesBody, examples.RUNNER_LINES, RUNNER_ERRORS)
    async def send_lines(self, request: HttpRequest, runner_api: RunnerDep,
                    runner_job_id: SessionId) -> rw.Ack:
        """Output or trace lines, batch ``seq``; a resent batch is accepted once."""
        return await take_lines(runner_api, runner_job_id, request.headers.get("authorization"),
                                await request.body())

    @command("/assembly", rw.AssemblyBody, examples.RUNNER_ASSEMBLY, RUNNER_ERRORS)
    async def report_assembly(self, request: HttpRequest, runner_api: RunnerDep,
                       runner_job_id: SessionId) -> rw.Ack:
        """The bounded assembly event (recorded once)."""
        token, body = await _read(request, rw.AssemblyBody)
        return await runner_api.assembly(runner_job_id, token, body)

    @command("/thread", rw.ThreadBody, examples.RUNNER_THREAD, RUNNER_ERRORS)
    async def report_thread(self, request: HttpRequest, runner_api: RunnerDep,
                     runner_job_id: SessionId) -> rw.Ack:
        """The thread the backend started or resumed."""
        token, body = await _read(request, rw.ThreadBody)
        return await runner_api.thread(runner_job_id, token, body)

    @command("/heartbeat", rw.HeartbeatBody, examples.RUNNER_HEARTBEAT, RUNNER_ERRORS,
              required=False)
    async def send_heartbeat(self, request: HttpRequest, runner_api: RunnerDep,
                        runner_job_id: SessionId) -> rw.HeartbeatAnswer:
        """Renew the job's lease (``SVC_RUNNER_LEASE_S``)."""
        return await take_heartbeat(runner_api, runner_job_id,
                                    request.headers.get("authorization"), await request.body())

    @command("/exit", rw.ExitBody, examples.RUNNER_EXIT, RUNNER_ERRORS)
    async def report_exit(self, request: HttpRequest, runner_api: RunnerDep,
                   runner_job_id: SessionId) -> rw.Ack:
        """How the job ended: state, exit code, failure kind and message."""
        token, body = await _read(request, rw.ExitBody)
        return await runner_api.exit(runner_job_id, token, body)

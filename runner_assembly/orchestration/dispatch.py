"""Dispatch, retry, materialisation, refresh and cancel of runner jobs.

Reservation (ledger) and materialisation (driver) are separate steps. Materialisation runs
under a Postgres advisory-lock fence, creates the core run record, checks the profile
secret by existence only, asks the driver to create the job (which adopts an existing one
of the same name) and records the result. Replaying it is always safe.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import asyncpg
import msgspec

from ledger.database import DbConnection, advisory_lock
from ledger.errors import DomainError, NotFound
from ledger.events import AttemptEnd, AttemptReserved, RunEnd
from ledger.ids import new_id
from ledger.redaction import redact_text
from ledger.run import (
    CreateRun,
    FinishRun,
    RecordAssembly,
    RecordRunnerJob,
    RecordRunnerStartup,
)
from ledger.runner_job import IssueJobToken
from ledger.states import (
    AttemptStatus,
    FailureKind,
    JobState,
    RunStatus,
    StorageKind,
    attempt_outcome,
    run_status_of,
)
from ledger.streams import TASK_STREAM, Command
from ledger.task import (
    AttemptIds,
    AttemptState,
    DispatchTask,
    FailMaterialization,
    FinishAttempt,
    MaterializeAttempt,
    RetryTask,
    TaskState,
    after_materialization_failure,
    used_key,
)
from ledger.writer import Outcome, Writer
from projections import orchestration_queries as oq
from projections.orchestration_queries import JobIdentity
from runner_assembly.assembly.capability import startup_record
from runner_assembly.assembly.failures import AssemblyFailure
from runner_assembly.assembly.plan import Ids, RunnerJobPlan, render_plan
from runner_assembly.assembly.profiles import PROFILE_SECRETS
from runner_assembly.assembly.resolve import Resolver
from runner_assembly.assembly.secret_store import (
    CheckedInTheJob,
    FileSecretStore,
    SecretStore,
)
from runner_assembly.assembly.transient_env import check_transient_env
from runner_assembly.contract.jobfile import JobFile, PromptCaps
from runner_assembly.drivers import faults
from runner_assembly.drivers.protocol import (
    DriverError,
    JobSpec,
    JobStatus,
    RunnerDriver,
)
from runner_assembly.orchestration.runner_protocol import RunnerProtocol, new_token
from runner_assembly.orchestration.session_turns import SessionTurns, choose_thread, folded
from runner_assembly.settings import RunnerSettings

log = logging.getLogger(__name__)
MAX_FAILURE_MESSAGE = 500
ACTOR = "dispatcher"


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

    def thread(self, session_thread: str | None) -> str | None:
        """The thread the task's turn resumes (None: it starts one)."""
        payload = self.contract.get("payload") or {}
        return choose_thread(payload.get("threadId"), (self.session_ref or {}).get("threadId"),
                             session_thread, self.persistent_session)


class Dispatcher:
    """Creates and tracks runner jobs for attempts."""

    def __init__(self, pool: asyncpg.Pool, fence_pool: asyncpg.Pool, writer: Writer,
                 driver: RunnerDriver, settings: RunnerSettings) -> None:
        self.pool = pool
        self.fence_pool = fence_pool
        self.writer = writer
        self.driver = driver
        self.settings = settings
        self.secrets: SecretStore = (CheckedInTheJob() if settings.driver == "kubernetes"
                                     else FileSecretStore(settings.secrets_dir))
        self.resolver = Resolver(namespace=settings.namespace, driver=settings.driver,
                                 secrets=self.secrets, defaults=settings.defaults,
                                 storage_class=settings.storage_class,
                                 rollout_subdir=settings.rollout_subdir)
        self.sessions = SessionTurns(pool, fence_pool, writer, driver, settings, self.resolver)
        self.protocol = RunnerProtocol(pool, writer, driver, settings.runner_lease_s,
                                       settings.runner_start_s)

    async def facts(self, task_id: str) -> TaskFacts:
        """What materialisation needs to know about a task, from its projections."""
        record = await oq.task_facts(self.pool, task_id)
        if record is None:
            raise NotFound(f"task {task_id} not found", taskId=task_id)
        contract = record.contract
        return TaskFacts(task_id, record.backend_profile or self.settings.default_profile,
                         contract["payload"]["prompt"], contract.get("resourceBundleRef"),
                         contract.get("sessionRef"), contract)

    async def task_state(self, task_id: str) -> TaskState | None:
        """The task's decision state, from its ledger stream."""
        state: TaskState | None = await folded(self.pool, TASK_STREAM, task_id)
        return state

    def _new_ids(self, facts: TaskFacts, attempt_id: str | None) -> AttemptIds:
        session_ref = facts.session_ref or {}
        session_id = session_ref.get("sessionId") if isinstance(session_ref, dict) else None
        return AttemptIds(
            attempt_id=attempt_id or new_id("att"), run_id=new_id("run"),
            command_id=new_id("cmd"), runner_job_id=new_id("job"),
            session_id=session_id if isinstance(session_id, str) else new_id("ses"),
            backend_profile=facts.backend_profile,
        )

    async def dispatch(self, task_id: str, attempt_id: str | None, dry_run: bool,
                       transient_env: dict[str, str] | None = None
                       ) -> tuple[Outcome, str | None]:
        """Reserve (or find) the attempt, then materialise it; return it with the outcome."""
        facts = await self.facts(task_id)
        env = transient_env or {}
        self.check_env(facts, env)
        await self.check_session(facts)
        command = DispatchTask(task_id, self._new_ids(facts, attempt_id),
                               named=attempt_id is not None)
        if dry_run:
            return await self.writer.plan(command), None
        outcome = await self.writer.execute(command, ACTOR)
        state: TaskState = outcome.state
        attempt = state.attempt(attempt_id) if attempt_id else state.latest
        return outcome, await self._resume(outcome, attempt, facts, env)

    async def retry(self, task_id: str, key: str, reason: str,
                    dry_run: bool) -> tuple[Outcome, str | None]:
        """Reserve a new attempt under ``key`` (or find the one it reserved), materialise it."""
        facts = await self.facts(task_id)
        await self.check_session(facts)
        command = RetryTask(task_id, key, reason, self._new_ids(facts, None))
        if dry_run:
            return await self.writer.plan(command), None
        outcome = await self.writer.execute(command, ACTOR)
        return outcome, await self._resume(outcome, used_key(outcome.state, key), facts)

    async def _resume(self, outcome: Outcome, attempt: AttemptState | None,
                      facts: TaskFacts, transient_env: dict[str, str] | None = None) -> str:
        """Materialise the attempt a reservation (or its replay) points at, if still due."""
        assert attempt is not None
        if outcome.events:
            faults.crash_after_reserve(self.settings.faults)
        if attempt.state == AttemptStatus.RESERVED:
            await self.materialize(facts.task_id, attempt.attempt_id, facts, transient_env,
                                   attempt)
        return attempt.attempt_id

    async def check_session(self, facts: TaskFacts) -> None:
        """Refuse, before anything is reserved, a task whose session belongs to another
        profile, was evicted, or is running a turn (other than that of the task's reserved
        attempt, which dispatching again resumes)."""
        if facts.persistent_session:
            assert facts.session_ref is not None
            task = await self.task_state(facts.task_id)
            latest = task.latest if task is not None else None
            resumed = latest.ids.runner_job_id if latest is not None and latest.ids \
                and latest.state == AttemptStatus.RESERVED else None
            await self.sessions.check_usable(facts.session_ref["sessionId"],
                                             facts.backend_profile, resumed)

    async def session_thread(self, facts: TaskFacts, session_id: str) -> str | None:
        """The thread a turn of this task in ``session_id`` would resume."""
        row = await self.sessions.row(session_id) if facts.persistent_session else None
        return facts.thread(row.thread_id if row else None)

    def job_plan(self, facts: TaskFacts, ids: Ids, transient_env: dict[str, str],
                 thread_id: str | None = None) -> RunnerJobPlan:
        """Resolve the assembly (no secret value is read) and render the job's plan."""
        assembly = self.resolver.resolve(facts.contract, facts.backend_profile, transient_env)
        return render_plan(assembly, ids, namespace=self.settings.namespace,
                           driver=self.driver.name, smoke_tools=self.settings.smoke_tools,
                           thread_id=thread_id)

    async def _planned_ids(self, task_id: str, events: Sequence[msgspec.Struct],
                           attempt_id: str | None) -> Ids | None:
        """Ids of the attempt a dry run would reserve (from its events) or resume."""
        for event in events:
            if isinstance(event, AttemptReserved):
                return Ids(task_id=task_id, attempt_id=event.attempt_id, run_id=event.run_id,
                           command_id=event.command_id, runner_job_id=event.runner_job_id)
        row = await oq.attempt_identity(self.pool, task_id, attempt_id) if attempt_id else None
        if attempt_id is None or row is None:
            return None
        return Ids(task_id=task_id, attempt_id=attempt_id, run_id=row.run_id,
                   command_id=row.command_id, runner_job_id=row.runner_job_id)

    def check_env(self, facts: TaskFacts, transient_env: dict[str, str]) -> None:
        """Refuse forbidden ``transientEnv`` names, or ``ext-ssh`` with no endpoint."""
        check_transient_env(transient_env, facts.contract, self.settings.defaults)

    async def plan_for(self, facts: TaskFacts, events: Sequence[msgspec.Struct],
                       attempt_id: str | None,
                       transient_env: dict[str, str]) -> dict[str, object]:
        """The dry-run view of the job an attempt would get: its plan, or why assembly fails.

        ``events`` are those the dry run would append (a reservation names the new ids);
        otherwise ``attempt_id`` names the existing attempt.
        """
        ids = await self._planned_ids(facts.task_id, events, attempt_id)
        if ids is None:
            return {"runnerJob": None}
        try:
            thread = await self.session_thread(facts, _session_id(facts, ids))
            plan = self.job_plan(facts, ids, transient_env, thread)
        except AssemblyFailure as failure:
            return {"runnerJob": None, "assemblyFailure": {
                "failureKind": failure.kind, "failureMessage": bounded(failure.message)}}
        return {"runnerJob": msgspec.to_builtins(plan), "valuesPrinted": False}

    def check_dependencies(self, facts: TaskFacts) -> list[str]:
        """Missing keys of the profile secret (existence only)."""
        secret = PROFILE_SECRETS[facts.backend_profile]
        return self.secrets.missing_keys(self.settings.namespace, secret)

    @asynccontextmanager
    async def fence(self, run_id: str, attempt_id: str) -> AsyncIterator[DbConnection]:
        """Serialise job creation: per namespace with retention, else per run and attempt."""
        scope = (f"namespace/{self.settings.namespace}" if self.settings.retention
                 else f"run/{run_id}/{attempt_id}")
        async with self.fence_pool.acquire() as conn, advisory_lock(conn, scope):
            yield conn

    async def _take_capacity(self, conn: DbConnection) -> bool:
        """Compare-and-swap one slot of the namespace's capacity, reclaiming finished jobs."""
        namespace = self.settings.namespace
        await oq.ensure_capacity(conn, namespace, self.settings.retention_capacity)
        for _ in range(2):
            if await oq.take_capacity(conn, namespace):
                return True
            await oq.reclaim_capacity(conn, namespace)
        return False

    async def materialize(self, task_id: str, attempt_id: str, facts: TaskFacts | None = None,
                          transient_env: dict[str, str] | None = None,
                          reserved: AttemptState | None = None) -> None:
        """Create the attempt's run and runner job (or adopt them); record the outcome.

        ``reserved``: the attempt as the caller's reservation left it (its ids never change),
        which spares a fold of the task stream; the state is always re-read under the fence.
        Ledger writes are grouped (one transaction each when the writer can): the run, the
        session and the turn's reservation, committed before the driver creates the job;
        then the job, the turn's start and the attempt's materialisation.
        """
        facts = facts or await self.facts(task_id)
        if reserved is None or reserved.ids is None:
            task = await self.task_state(task_id)
            reserved = task.attempt(attempt_id) if task is not None else None
        if reserved is None or reserved.ids is None:
            raise NotFound(f"attempt {attempt_id} not found", attemptId=attempt_id)
        row = reserved.ids
        env = transient_env or {}
        async with self.fence(row.run_id, attempt_id) as conn:
            task = await self.task_state(task_id)
            current = task.attempt(attempt_id) if task is not None else None
            if task is None or current is None or current.state != AttemptStatus.RESERVED:
                return  # another caller finished it while we waited at the fence
            ids = Ids(task_id=task_id, attempt_id=attempt_id, run_id=row.run_id,
                      command_id=row.command_id, runner_job_id=row.runner_job_id)
            session_id = row.session_id
            async with self.sessions.lock(session_id, conn):
                token, issue = new_token(row.runner_job_id, session_id=session_id,
                                         run_id=row.run_id, task_id=task_id,
                                         attempt_id=attempt_id)
                created = await self._reserve_job(conn, facts, ids, row, env, issue)
                if created is None:
                    return
                plan, thread, issued = created
                if not issued:
                    await self.writer.execute(issue, ACTOR)
                spec = dataclasses.replace(self.job_spec(facts, row, plan, env, thread),
                                           runner_token=token)
                log.debug("creating runner job %s for attempt %s: plan %s", spec.runner_job_id,
                          attempt_id, msgspec.json.encode(plan).decode())
                try:
                    handle = await self.driver.create(spec)
                except DriverError as error:
                    if after_materialization_failure(task.state, error.kind) \
                            != AttemptStatus.RESERVED:  # ended before the session is free
                        await self.protocol.end(row.runner_job_id, error.kind)
                        await self.sessions.abandon_turn(session_id, row.runner_job_id,
                                                         error.kind, bounded(error.message))
                    # else the turn stays reserved with the attempt: the job's token still
                    # works (a runner the create started may claim), so no other turn of the
                    # session may start until dispatching again adopts the job or a cancel
                    # ends it (docs/decisions.md, "A failed create keeps its session turn")
                    await self._fail(task_id, attempt_id, error.kind, error.message)
                    return
                faults.crash_at(self.settings.faults, "crash-after-create")
                outcomes = await self.writer.execute_all([
                    RecordRunnerJob(row.run_id, handle.driver, handle.handle,
                                    msgspec.to_builtins(plan)),
                    self.sessions.start_command(session_id, handle, row.runner_job_id),
                    MaterializeAttempt(task_id, attempt_id)], ACTOR)
        attempt = outcomes[-1].state.attempt(attempt_id)
        if attempt is not None and attempt.state == AttemptStatus.CANCELLED:
            await self.cancel_job(row.run_id, row.runner_job_id)

    async def _reserve_job(self, conn: DbConnection, facts: TaskFacts, ids: Ids,
                           row: AttemptIds, env: dict[str, str], issue: IssueJobToken
                           ) -> tuple[RunnerJobPlan, str | None, bool] | None:
        """Record the run, open the session and reserve its turn (in this order, before the
        job exists; the job's token with them when nothing comes between); the job's plan,
        its thread and whether ``issue`` was executed, or None when the attempt failed."""
        session_id = row.session_id
        existing = await self.sessions.row(session_id)
        conversation = existing.conversation_id if existing \
            else self._conversation(facts, session_id)
        thread = facts.thread(existing.thread_id if existing else None)
        plan: RunnerJobPlan | None = None
        failure: tuple[str, str] | None = None
        try:
            plan = self.job_plan(facts, ids, env, thread)
        except AssemblyFailure as assembly_failure:
            failure = _failure_of(assembly_failure)
        reserve = self.sessions.reserve_command(
            session_id, existing, run_id=row.run_id, command_id=row.command_id,
            runner_job_id=row.runner_job_id, thread_id=thread, task_id=facts.task_id,
            prompt=facts.prompt, profile=row.backend_profile)
        commands: list[Command] = [
            self._create_run(ids.task_id, ids.attempt_id, row, facts),
            self.sessions.open_command(session_id, self._conversation(facts, session_id),
                                       row.backend_profile,
                                       persistent=facts.persistent_session)]
        reserved_with_them = failure is None and not self.settings.retention
        if reserved_with_them:  # no capacity to take first: one transaction, token too
            commands += [reserve, issue]
        try:
            await self.writer.execute_all(commands, ACTOR)
            storage = existing.storage_kind if existing else StorageKind.VOLUME \
                if facts.persistent_session else StorageKind.NONE
            await self.sessions.ensure_volume(session_id, conversation, storage)
            if failure is not None:
                await self._fail(ids.task_id, ids.attempt_id, *failure)
                log.debug("assembly of attempt %s failed: %s: %s", ids.attempt_id, *failure)
                return None
            if not reserved_with_them:
                if not await self._take_capacity(conn):
                    await self._fail(ids.task_id, ids.attempt_id, FailureKind.INFRA_FAILED,
                                     "runner capacity of the namespace is exhausted")
                    return None
                await self.writer.execute(reserve, ACTOR)
        except DomainError as refusal:  # the session's (CreateRun never refuses)
            await self._fail(ids.task_id, ids.attempt_id, *_failure_of(refusal))
            return None
        assert plan is not None
        return plan, thread, reserved_with_them

    def job_spec(self, facts: TaskFacts, row: JobIdentity | AttemptIds, plan: RunnerJobPlan,
                  transient_env: dict[str, str], thread_id: str | None) -> JobSpec:
        """What the driver gets: the plan plus the per-job secret's values."""
        defaults = self.settings.defaults
        job_secret = {**{name: defaults.extSshEndpoints[name]
                         for name in plan.endpoint_defaults}, **transient_env}
        job = JobFile(
            runner_job_id=row.runner_job_id, run_id=row.run_id, task_id=facts.task_id,
            attempt_id=plan.ids.attempt_id, session_id=row.session_id,
            backend_profile=row.backend_profile,
            backend_command=list(self.settings.backend_commands[row.backend_profile]),
            prompt=facts.prompt, plan=plan,
            prompt_caps=PromptCaps(per_prompt=defaults.promptMaxBytes,
                                   total=defaults.promptsMaxTotalBytes),
            new_thread=thread_id is None, thread_id=thread_id,
            resource_bin_path=self.settings.resource_bin_path,
            workspace_root=self.settings.workspace_root)
        return JobSpec(job=job, secret_root=str(self.settings.secrets_dir),
                       job_secret=job_secret)

    @staticmethod
    def _conversation(facts: TaskFacts, session_id: str) -> str:
        session_ref = facts.session_ref if isinstance(facts.session_ref, dict) else {}
        conversation = session_ref.get("conversationId")
        return conversation if isinstance(conversation, str) \
            else "cnv_" + session_id.removeprefix("ses_")

    def _create_run(self, task_id: str, attempt_id: str, row: AttemptIds,
                    facts: TaskFacts) -> CreateRun:
        prompt = facts.prompt.encode()
        return CreateRun(
            run_id=row.run_id, task_id=task_id, attempt_id=attempt_id,
            command_id=row.command_id, runner_job_id=row.runner_job_id,
            session_id=row.session_id, conversation_id=self._conversation(facts, row.session_id),
            backend_profile=row.backend_profile,
            resource_bundle_ref=facts.resource_bundle_ref,
            prompt_sha256=hashlib.sha256(prompt).hexdigest(), prompt_bytes=len(prompt),
        )

    async def _fail(self, task_id: str, attempt_id: str, kind: str, message: str) -> None:
        """Fail the attempt's materialisation, then end its run with the same blocker
        (SPEC 5.2 rule 9): the run and command records never stay ``created``.

        An attempt that this leaves ended (not reserved) also ends its runner job first: a
        runner the failed create may still have started (a forkserver that answered too late,
        a create that worked but reported an error) has its claim refused, so no backend runs
        for it. One left reserved keeps its job's token: dispatching again adopts that job.
        """
        outcome = await self.writer.execute(
            FailMaterialization(task_id, attempt_id, kind, bounded(message)), ACTOR)
        attempt = outcome.state.attempt(attempt_id) if outcome.state is not None else None
        ended = {AttemptStatus.BLOCKED: RunStatus.BLOCKED, AttemptStatus.FAILED: RunStatus.FAILED}
        if attempt is not None and attempt.ids is not None and attempt.state in ended:
            await self.protocol.end(attempt.ids.runner_job_id, str(attempt.state))
            await self.writer.execute(FinishRun(attempt.ids.run_id, RunEnd(
                ended[attempt.state], failure_kind=kind, failure_message=bounded(message))),
                ACTOR)

    async def refresh(self, task_id: str, dry_run: bool) -> Outcome | None:
        """Write the core terminal state of the latest attempt back; None when nothing to do."""
        task = await self.task_state(task_id)
        latest = task.latest if task is not None else None
        if latest is None or latest.ids is None or latest.state != AttemptStatus.RUNNING:
            return None
        row = latest.ids
        status = await self.protocol.status(row.runner_job_id, stop_lost=not dry_run)
        if not status.terminal:
            return None
        ended, implied = attempt_outcome(status.state)
        kind = status.failure_kind or implied
        message = bounded(status.failure_message) if status.failure_message else None
        finish = FinishAttempt(task_id, AttemptEnd(
            row.attempt_id, ended, kind, message, status.exit_code,
            started_at=status.started_at.isoformat() if status.started_at else msgspec.UNSET,
            finished_at=status.finished_at.isoformat() if status.finished_at
            else msgspec.UNSET))
        if dry_run:
            return await self.writer.plan(finish)
        await self.record_runner_events(row.run_id, status)
        await self.sessions.finish(row.session_id, row.runner_job_id, status)
        await self.writer.execute(FinishRun(row.run_id, RunEnd(
            run_status_of(status.state), status.exit_code, kind, message)), ACTOR)
        outcome = await self.writer.execute(finish, ACTOR)
        await self.protocol.end(row.runner_job_id, str(status.state))
        return outcome

    async def record_runner_events(self, run_id: str, status: JobStatus) -> None:
        """Record what the runner reported: its startup event (bounded to the SPEC 2.11
        fields), then its assembly event. Each is recorded once."""
        startup = startup_record(status.startup)
        if startup is not None:
            await self.writer.execute(RecordRunnerStartup(run_id, startup), ACTOR)
        if status.assembly is not None:
            await self.writer.execute(RecordAssembly(run_id, status.assembly), ACTOR)

    async def cancel_job(self, run_id: str, runner_job_id: str) -> None:
        """Stop a runner job and record the run (and its session turn) as cancelled."""
        await self.driver.cancel(runner_job_id)
        await self.protocol.end(runner_job_id, JobState.CANCELLED)
        await self.writer.execute(FinishRun(run_id, RunEnd(RunStatus.CANCELLED)), ACTOR)
        session_id = await oq.session_of_job(self.pool, runner_job_id)
        if session_id is not None:
            await self.sessions.finish(session_id, runner_job_id, JobStatus(JobState.CANCELLED))


def _session_id(facts: TaskFacts, ids: Ids) -> str:
    ref = facts.session_ref or {}
    return str(ref.get("sessionId") or ids.runner_job_id)


def _failure_of(failure: AssemblyFailure | DomainError) -> tuple[str, str]:
    if isinstance(failure, AssemblyFailure):
        return failure.kind, failure.message
    return failure.code, failure.message

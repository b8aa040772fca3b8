"""From a task's facts to its runner job: the value-free plan, the spec the driver gets, and
the dry-run view of both. No secret value is read here."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import msgspec

from ledger.errors import Refused
from ledger.task import AttemptIds
from projections.orchestration_queries import JobIdentity
from runner_assembly.assembly import fetch_policy
from runner_assembly.assembly.deadline import job_deadline_s
from runner_assembly.assembly.failures import AssemblyFailure
from runner_assembly.assembly.plan import Ids, RunnerJobPlan, render_plan
from runner_assembly.assembly.profiles import PROFILE_SECRETS
from runner_assembly.assembly.resolve import Resolver
from runner_assembly.assembly.secret_store import CheckedInTheJob, FileSecretStore, SecretStore
from runner_assembly.assembly.transient_env import check_transient_env
from runner_assembly.contract.jobfile import JobFile, PromptCaps
from runner_assembly.contract.plan import RepositoryFetch
from runner_assembly.drivers.protocol import JobSpec
from runner_assembly.orchestration.facts import TaskFacts, bounded
from runner_assembly.settings import RunnerSettings


def secret_store(settings: RunnerSettings) -> SecretStore:
    """Where secret existence is checked: the file store locally, the job on Kubernetes."""
    if settings.driver == "kubernetes":
        return CheckedInTheJob()
    return FileSecretStore(settings.secrets_dir)


def resolver(settings: RunnerSettings, secrets: SecretStore) -> Resolver:
    """The assembly resolver of these settings."""
    return Resolver(namespace=settings.namespace, driver=settings.driver, secrets=secrets,
                    defaults=settings.defaults, storage_class=settings.storage_class,
                    rollout_subdir=settings.rollout_subdir, fetch_allow=settings.fetch_allow)


@dataclass(frozen=True)
class JobPlanner:
    """Resolves a task's assembly into a runner job's plan and the driver's spec."""

    settings: RunnerSettings
    driver_name: str
    secrets: SecretStore
    resolver: Resolver

    def check_env(self, facts: TaskFacts, transient_env: dict[str, str]) -> None:
        """Refuse, before anything is reserved, forbidden ``transientEnv`` names, ``ext-ssh``
        with no endpoint, and a secret the task's tenant is not granted
        (:meth:`check_grants`)."""
        check_transient_env(transient_env, facts.contract, self.settings.defaults)
        self.check_grants(facts.contract)

    def check_grants(self, contract: dict[str, Any]) -> None:
        """``tenant-policy-denied`` (a :class:`Refused`) for a tool or repository secret the
        contract's tenant is not granted for its use (DESIGN 12)."""
        try:
            self.resolver.check_grants(contract)
        except AssemblyFailure as failure:
            raise Refused(failure.kind, failure.message, tenantId=contract.get("tenantId"),
                          **failure.details) from None

    async def plan(self, facts: TaskFacts, ids: Ids, transient_env: dict[str, str],
                   thread_id: str | None = None) -> RunnerJobPlan:
        """Resolve the assembly (no secret value is read) and render the job's plan; an
        :class:`AssemblyFailure` names what cannot be assembled, a repository host that
        resolves to a refused address included (looked up in a thread, never on the event
        loop)."""
        assembly = self.resolver.resolve(facts.contract, facts.backend_profile, transient_env)
        plan = render_plan(assembly, ids, namespace=self.settings.namespace,
                           driver=self.driver_name, smoke_tools=self.settings.smoke_tools,
                           thread_id=thread_id,
                           deadline_s=job_deadline_s(self.settings.timeout_budgets,
                                                     facts.queue))
        if plan.resource_bundle is not None and plan.resource_bundle.fetches:
            await asyncio.to_thread(self._check_hosts, plan.resource_bundle.fetches)
        return plan

    def _check_hosts(self, fetches: list[RepositoryFetch]) -> None:
        for fetch in fetches:
            fetch_policy.check_fetch(fetch.fetch_repo_url, self.settings.fetch_allow,
                                     strict=False)

    async def preview(self, facts: TaskFacts, ids: Ids | None, transient_env: dict[str, str],
                      thread_id: str | None) -> dict[str, object]:
        """The dry-run view of a job: its plan, or why its assembly fails."""
        if ids is None:
            return {"runnerJob": None}
        try:
            plan = await self.plan(facts, ids, transient_env, thread_id)
        except AssemblyFailure as failure:
            return {"runnerJob": None, "assemblyFailure": {
                "failureKind": failure.kind, "failureMessage": bounded(failure.message)}}
        return {"runnerJob": msgspec.to_builtins(plan), "valuesPrinted": False}

    def missing_secret_keys(self, facts: TaskFacts) -> list[str]:
        """Missing keys of the task's profile secret (existence only)."""
        secret = PROFILE_SECRETS[facts.backend_profile]
        return self.secrets.missing_keys(self.settings.namespace, secret)

    def spec(self, facts: TaskFacts, job: JobIdentity | AttemptIds, plan: RunnerJobPlan,
             transient_env: dict[str, str], thread_id: str | None) -> JobSpec:
        """What the driver gets: the plan plus the per-job secret's values (its token is
        added when the job is materialised)."""
        settings = self.settings
        defaults = settings.defaults
        job_secret = {**{name: defaults.extSshEndpoints[name]
                         for name in plan.endpoint_defaults}, **transient_env}
        file = JobFile(
            runner_job_id=job.runner_job_id, run_id=job.run_id, task_id=facts.task_id,
            attempt_id=plan.ids.attempt_id, session_id=job.session_id,
            backend_profile=job.backend_profile,
            backend_command=list(settings.backend_commands[job.backend_profile]),
            backend_kind=settings.backend_kinds.get(job.backend_profile, "command"),
            prompt=facts.prompt, plan=plan,
            prompt_caps=PromptCaps(per_prompt=defaults.promptMaxBytes,
                                   total=defaults.promptsMaxTotalBytes),
            new_thread=thread_id is None, thread_id=thread_id,
            resource_bin_path=settings.resource_bin_path,
            workspace_root=settings.workspace_root, fetch_allow=settings.fetch_allow,
            output_max_bytes=settings.output_max_bytes,
            sandbox_read_only=list(settings.sandbox_read_only),
            manager_silence_s=settings.runner_lease_s + settings.runner_start_s)
        return JobSpec(job=file, secret_root=str(settings.secrets_dir), job_secret=job_secret)

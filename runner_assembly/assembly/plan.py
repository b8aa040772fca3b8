"""The runner job plan: what a job is rendered from, shown by dry runs and stored on the run.

Rendered from the resolved :class:`~runner_assembly.assembly.resolve.Assembly` and the
reserved ids only. Its types are the contract's (:mod:`runner_assembly.contract.plan`): the
runner decodes the same ones from the job file. It names secrets, keys, projection kinds,
mount paths and environment variables; it holds no value (``valuesPrinted=false``).
"""

from __future__ import annotations

import hashlib

import msgspec

from runner_assembly.assembly.capability import work_ready_summary
from runner_assembly.assembly.names import (
    SESSION_ENV,
    STATIC_ENV,
    job_name,
    per_job_secret_name,
)
from runner_assembly.assembly.resolve import Assembly
from runner_assembly.contract.plan import (
    BundleItem,
    BundleSummary,
    EnvEntry,
    Ids,
    PerJobSecret,
    PlanThread,
    PromptItem,
    RunnerJobPlan,
)

__all__ = ["BundleSummary", "EnvEntry", "Ids", "RunnerJobPlan", "render_plan", "workspace_key"]


def workspace_key(assembly: Assembly, ids: Ids) -> str:
    """A short stable key naming the workspace and its managed overlay."""
    bundle = assembly.resource_bundle or {}
    basis = f"{bundle.get('repoUrl', '')}\n{assembly.branch or ''}\n{ids.task_id}"
    return hashlib.sha256(basis.encode()).hexdigest()[:16]


def render_plan(assembly: Assembly, ids: Ids, *, namespace: str, driver: str,
                smoke_tools: tuple[str, ...], thread_id: str | None = None,
                deadline_s: int | None = None) -> RunnerJobPlan:
    """The value-free plan of the runner job for a resolved assembly; with ``thread_id``
    the backend resumes that thread, else it starts a new one; ``deadline_s`` bounds the
    job's life (none without)."""
    env = [EnvEntry(name=name, source="static") for name in STATIC_ENV]
    if thread_id is not None:
        env.append(EnvEntry(name="SVC_THREAD_ID", source="static"))
    if assembly.session is not None:
        env += [EnvEntry(name=name, source="static") for name in SESSION_ENV]
    env += [EnvEntry(name=use.env_name, source="secret", secret_name=use.name,
                     key=use.keys[0])
            for use in assembly.secrets if use.projection == "env" and use.env_name]
    job_secret = per_job_secret_name(ids.runner_job_id)
    secret_keys = sorted({*assembly.transient_env.names, *assembly.endpoint_defaults})
    env += [EnvEntry(name=name, source="per-job-secret", secret_name=job_secret, key=name)
            for name in secret_keys]
    return RunnerJobPlan(
        job_name=job_name(ids.runner_job_id), namespace=namespace, driver=driver,
        ids=ids, backend_profile=assembly.backend_profile, image=assembly.image, env=env,
        secrets=assembly.secrets,
        per_job_secret=PerJobSecret(name=job_secret, keys=secret_keys),
        session_volume=assembly.session, workspace_key=workspace_key(assembly, ids),
        resource_bundle=_bundle_summary(assembly), transient_env=assembly.transient_env,
        endpoint_defaults=assembly.endpoint_defaults, smoke_tools=list(smoke_tools),
        capability=work_ready_summary(),
        thread=PlanThread(mode="resume" if thread_id else "start", thread_id=thread_id),
        provider_id=assembly.provider_id, active_deadline_seconds=deadline_s,
    )


def _bundle_summary(assembly: Assembly) -> BundleSummary | None:
    bundle = assembly.resource_bundle
    if not bundle:
        return None
    credential = bundle.get("credentialRef")
    return BundleSummary(
        repo_url=bundle["repoUrl"], ref=bundle.get("ref"), commit_id=bundle.get("commitId"),
        branch=assembly.branch,
        bundles=msgspec.convert(bundle.get("bundles", []), list[BundleItem]),
        prompt_refs=msgspec.convert(bundle.get("promptRefs", []), list[PromptItem]),
        required_skills=[s["name"] for s in bundle.get("requiredSkills", [])],
        credential=credential["name"] if credential else None, fetches=assembly.fetches)

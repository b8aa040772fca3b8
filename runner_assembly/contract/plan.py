"""The runner job plan's types: what a job is rendered from, value-free (SPEC 5.2, 9).

The manager renders a :class:`RunnerJobPlan` (:func:`runner_assembly.assembly.plan.render_plan`),
stores it on the run and shows it in dry runs; the job file carries it to the runner, which
decodes these same types. It names secrets, keys, projection kinds, mount paths and
environment variables; it holds no value (``valuesPrinted=false``).
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec


class SecretUse(msgspec.Struct, kw_only=True, omit_defaults=True, rename="camel"):
    """One secret the run uses, by reference, and how it is projected."""

    role: Literal["provider", "repository", "tool"]
    name: str
    namespace: str
    keys: list[str]
    projection: Literal["backend-home", "fetch-only", "env", "volume"]
    tool: str | None = None
    purpose: str | None = None
    env_name: str | None = None
    mount_path: str | None = None
    read_only: bool = True
    hosts: list[str] | None = None
    """A repository credential's granted hosts (``host[:port]``): the runner sends it to
    no other host, and only over ``https`` or ``ssh``."""


class ImageResolution(msgspec.Struct, kw_only=True, rename="camel"):
    """The backend image: source, environment identity, digest-pinned image, status."""

    source: dict[str, Any] | None
    environment_id: str | None
    image: str | None
    status: Literal["reused", "not-applicable"]


class RepositoryFetch(msgspec.Struct, kw_only=True, rename="camel"):
    """Where a bundle repository is fetched from (SPEC 6 repository fetch)."""

    repo_url: str
    fetch_repo_url: str
    mirror_used: bool
    mirror_base_url: str | None


class SessionVolume(msgspec.Struct, kw_only=True, rename="camel"):
    """The session's persistent volume, resolved or created before the job (SPEC 9)."""

    session_id: str
    conversation_id: str
    thread_id: str | None
    pvc_name: str
    namespace: str
    rollout_subdir: str
    size: str
    storage_class: str
    values_printed: bool = False


class NamesSummary(msgspec.Struct, kw_only=True, rename="camel"):
    """Environment entries shown by name, count and hash only (SPEC 2.10)."""

    names: list[str]
    count: int
    sha256: str | None


class EnvEntry(msgspec.Struct, kw_only=True, omit_defaults=True, rename="camel"):
    """One environment variable of the backend, by name and source; never its value."""

    name: str
    source: Literal["static", "secret", "per-job-secret"]
    secret_name: str | None = None
    key: str | None = None


class Ids(msgspec.Struct, kw_only=True, rename="camel"):
    """The reserved identities a job is named after."""

    task_id: str
    attempt_id: str
    run_id: str
    command_id: str
    runner_job_id: str


class BundleItem(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One part of the resource bundle (the task's ``resourceBundleRef.bundles[]``, as
    given); a missing repo, ref or commit inherits the top's."""

    subpath: str
    target_path: str
    name: str | None = None
    repo_url: str | None = msgspec.field(default=None, name="repoUrl")
    ref: str | None = None
    commit_id: str | None = msgspec.field(default=None, name="commitId")


class PromptItem(msgspec.Struct, kw_only=True):
    """A prompt in the bundle (the task's ``resourceBundleRef.promptRefs[]``)."""

    name: str
    path: str
    inject: str = "thread-start"
    required: bool = False


class BundleSummary(msgspec.Struct, kw_only=True, rename="camel"):
    """What the runner will materialise: references, not content."""

    repo_url: str
    ref: str | None
    commit_id: str | None
    branch: str | None
    bundles: list[BundleItem]
    prompt_refs: list[PromptItem]
    required_skills: list[str]
    credential: str | None
    fetches: list[RepositoryFetch]


class PerJobSecret(msgspec.Struct, kw_only=True, rename="camel"):
    """The job's own secret (transient env, endpoint defaults), by name and keys."""

    name: str
    keys: list[str]
    owned_by_job: bool = True


class PlanThread(msgspec.Struct, kw_only=True, rename="camel"):
    """Whether the backend starts a thread or resumes ``threadId``."""

    mode: Literal["start", "resume"] = "start"
    thread_id: str | None = None


class RunnerJobPlan(msgspec.Struct, kw_only=True, rename="camel"):
    """The rendered runner job, value-free (SPEC 5.2 rule 3, 2.10, 2.11, 9)."""

    job_name: str
    namespace: str
    driver: str
    ids: Ids
    backend_profile: str
    image: ImageResolution
    env: list[EnvEntry]
    secrets: list[SecretUse]
    per_job_secret: PerJobSecret
    session_volume: SessionVolume | None
    workspace_key: str
    resource_bundle: BundleSummary | None
    transient_env: NamesSummary
    endpoint_defaults: list[str]
    smoke_tools: list[str]
    capability: dict[str, Any]
    thread: PlanThread = msgspec.field(default_factory=PlanThread)
    """``mode`` (``start`` or ``resume``) and the ``threadId`` a resume continues."""
    provider_id: str | None = None
    """The run policy's ``providerId`` (SPEC 2.7), as the task carried it."""
    values_printed: bool = False
    active_deadline_seconds: int | None = None
    """The job's deadline: its queue's timeout budget plus a margin; None without a budget
    (:mod:`runner_assembly.assembly.deadline`)."""

"""The job's ``spec.json`` as the runner reads it: the driver's ``JobSpec.public()``, the plan
inside it in its JSON form (``RunnerJobPlan``, camelCase)."""

from __future__ import annotations

from typing import NotRequired, TypedDict

from runner_assembly.runner.projection import SecretUseSpec


class BundleItemSpec(TypedDict):
    """One part of the resource bundle; a missing repo, ref or commit inherits the top's."""

    subpath: str
    target_path: str
    name: NotRequired[str]
    repoUrl: NotRequired[str]
    ref: NotRequired[str]
    commitId: NotRequired[str]


class PromptRefSpec(TypedDict):
    """A prompt in the bundle (``PromptRef``)."""

    name: str
    path: str
    inject: NotRequired[str]
    required: NotRequired[bool]


class FetchSpec(TypedDict):
    """Where a bundle repository is fetched from (``RepositoryFetch``)."""

    repoUrl: str
    fetchRepoUrl: str
    mirrorUsed: bool
    mirrorBaseUrl: str | None


class BundleSpec(TypedDict):
    """What the runner materialises (``BundleSummary``)."""

    repoUrl: str
    ref: str | None
    commitId: str | None
    branch: str | None
    bundles: list[BundleItemSpec]
    promptRefs: list[PromptRefSpec]
    requiredSkills: list[str]
    credential: str | None
    fetches: list[FetchSpec]


class SessionVolumeSpec(TypedDict):
    """The session's persistent volume (``SessionVolume``)."""

    sessionId: str
    conversationId: str
    threadId: str | None
    pvcName: str
    namespace: str
    rolloutSubdir: str


class NamesSpec(TypedDict):
    """Environment entries by name only (``NamesSummary``)."""

    names: list[str]


class PerJobSecretSpec(TypedDict):
    """The job's own secret, by name and keys."""

    name: str
    keys: list[str]


class PlanSpec(TypedDict):
    """The value-free plan (``RunnerJobPlan``): the fields the runner reads."""

    ids: dict[str, str]
    workspaceKey: str
    backendProfile: str
    image: dict[str, object]
    secrets: list[SecretUseSpec]
    perJobSecret: PerJobSecretSpec
    sessionVolume: SessionVolumeSpec | None
    resourceBundle: BundleSpec | None
    transientEnv: NamesSpec
    smokeTools: list[str]
    capability: dict[str, object]
    thread: NotRequired[dict[str, object]]


class PromptCapsSpec(TypedDict):
    """Byte caps of the prompts: each one and all together."""

    perPrompt: int
    total: int


class RunnerSpec(TypedDict):
    """``spec.json``: the fields the runner reads."""

    runner_job_id: str
    session_id: str
    backend_command: list[str]
    prompt: str
    plan: PlanSpec
    prompt_caps: PromptCapsSpec
    new_thread: bool
    thread_id: str | None
    resource_bin_path: str | None
    workspace_root: str | None
    volume_dir: NotRequired[str]

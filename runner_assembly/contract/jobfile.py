"""The job file: everything a runner job executes with, as the manager's driver writes it
and the runner reads it (a local job's ``spec.json``, a pod's mounted ``job-spec.json``).

One msgspec type on both sides, versioned: the runner refuses a file whose ``version`` it
does not know (:class:`JobFileRefused`). It carries no secret value: the per-job secret's
values and the runner token travel in the per-job secret only (docs/runner-protocol.md,
"The job file").
"""

from __future__ import annotations

import msgspec

from runner_assembly.contract.plan import RunnerJobPlan

VERSION = 1
"""The job file format this code writes and reads."""
KNOWN_VERSIONS = frozenset({VERSION})


class PromptCaps(msgspec.Struct, kw_only=True, rename="camel"):
    """Byte caps of the bundle's prompts: each one and all together."""

    per_prompt: int
    total: int


class FetchAllow(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """The operator's allow-list of repository sources that are otherwise refused
    (DESIGN 13): ``file://`` below ``file_roots`` (``SVC_FETCH_ALLOW_FILE_ROOTS``) but never
    below ``denied_roots`` (the data directory, the workspace root), and loopback,
    link-local or metadata hosts named in ``hosts`` (``SVC_FETCH_ALLOW_HOSTS``,
    ``host[:port]``). The runner checks each fetch against it again, resolving the host.
    ``protected``: the service's own endpoints (``host:port`` of its database; the runner
    adds the manager's, ``SVC_RUNNER_API_URL``), which a pod backend's egress never
    reaches, allow-listed or not."""

    file_roots: list[str] = msgspec.field(default_factory=list)
    hosts: list[str] = msgspec.field(default_factory=list)
    denied_roots: list[str] = msgspec.field(default_factory=list)
    protected: list[str] = msgspec.field(default_factory=list)


class JobFile(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """What one runner job runs: its ids, backend command, prompt and value-free plan."""

    version: int = VERSION
    runner_job_id: str
    run_id: str
    task_id: str
    attempt_id: str
    session_id: str
    backend_profile: str
    backend_command: list[str]
    backend_kind: str = "command"
    """How the backend is run (``command``, ``reference`` or ``codex``: docs/backends.md);
    a file written before the kinds runs its command as ``command``."""
    prompt: str
    plan: RunnerJobPlan
    prompt_caps: PromptCaps
    new_thread: bool = True
    thread_id: str | None = None
    """The thread to resume (None: the backend starts a new one)."""
    resource_bin_path: str | None = None
    workspace_root: str | None = None
    """``SVC_WORKSPACE_ROOT`` (None: the driver's default place for checkouts)."""
    volume_dir: str | None = None
    """A local job's session volume directory (None: no volume, or a pod's mounted PVC)."""
    faults: list[str] = msgspec.field(default_factory=list)
    """Test-only runner crash points (``SVC_FAULTS``), written by the local driver."""
    fetch_allow: FetchAllow = msgspec.field(default_factory=FetchAllow)
    """Which repository sources the runner may fetch besides public hosts (default: none)."""
    output_max_bytes: int = 64 * 1024 * 1024
    """``SVC_OUTPUT_MAX_BYTES``: what the backend may print in this turn; past it the runner
    drops the rest and traces the count (:mod:`runner_assembly.runner.output_bound`)."""
    sandbox_read_only: list[str] = msgspec.field(default_factory=list)
    """``SVC_SANDBOX_READ_ONLY``: operator paths the backend's sandbox shows read-only."""
    manager_silence_s: float = 660.0
    """``SVC_RUNNER_LEASE_S`` plus ``SVC_RUNNER_START_S``: past this long without an answer
    from the manager, the manager ends the job as lost whatever its runner does, so the
    runner stops its backend and ends instead of running on for nobody."""


class JobFileRefused(Exception):
    """The job file is not one this runner can run: an unknown version, or malformed."""


class _Head(msgspec.Struct):
    version: int | None = None


def encode(job: JobFile) -> bytes:
    """The job file's bytes (JSON)."""
    return msgspec.json.encode(job)


def decode(data: bytes) -> JobFile:
    """The job file in ``data``; :class:`JobFileRefused` for a version this runner does not
    know (checked first) or a file that does not match it."""
    try:
        version = msgspec.json.decode(data, type=_Head).version
    except msgspec.DecodeError as error:
        raise JobFileRefused(f"the job file is not a JSON object: {error}") from None
    if version not in KNOWN_VERSIONS:
        raise JobFileRefused(f"job file version {version} is not one this runner knows "
                             f"(it reads {', '.join(map(str, sorted(KNOWN_VERSIONS)))})")
    try:
        return msgspec.json.decode(data, type=JobFile)
    except msgspec.DecodeError as error:
        raise JobFileRefused(f"the job file (version {version}) is malformed: {error}") \
            from None

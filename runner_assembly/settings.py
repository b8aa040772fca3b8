"""Runner configuration; the server builds it from its settings (``api.settings``)."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from runner_assembly.assembly.defaults import SPEC_SMOKE_TOOLS, RuntimeDefaults
from runner_assembly.assembly.profiles import PROFILES
from runner_assembly.assembly.workspace_root import check_root_setting
from runner_assembly.contract.jobfile import FetchAllow
from runner_assembly.runner.launch import isolated_python

DEFAULT_NAMESPACE = "svc-v01"
REFERENCE_BACKEND = tuple(isolated_python([str(Path(__file__).resolve().parents[1])],
                                          "reference_backend"))
"""The default backend command of every profile: the reference backend, started like the
runner (isolated, without ``site``) from the directory that holds this package; it needs
nothing but the standard library."""


BACKEND_KINDS = ("command", "reference", "codex")
"""``SVC_BACKEND_KIND_PROFILE_n`` (docs/backends.md)."""


def backend_of(profile: str, kind: str | None, command: tuple[str, ...] | None,
               resolve: bool = True) -> tuple[str, tuple[str, ...]]:
    """The kind and command of ``profile``'s backend from its settings (DESIGN 14): unset
    kind is ``command`` with a command, else ``reference``; ``codex``'s command is its
    program alone (else ``codex`` on ``PATH``), resolved to an absolute path when found and
    ``resolve`` (not for pods: the runner finds it on its image's ``PATH``).
    ``ValueError`` names the variable of a combination that cannot run."""
    number = profile.removeprefix("profile-")
    kind_name, command_name = (f"SVC_BACKEND_KIND_PROFILE_{number}",
                               f"SVC_BACKEND_COMMAND_PROFILE_{number}")
    kind = kind or ("command" if command else "reference")
    if kind == "reference":
        if command:
            raise ValueError(f"{kind_name}=reference runs the reference backend: unset "
                             f"{command_name} or choose the kind command")
        return kind, REFERENCE_BACKEND
    if kind == "command":
        if not command:
            raise ValueError(f"{kind_name}=command needs {command_name}")
        return kind, command
    program = command or ("codex",)
    if len(program) != 1:
        raise ValueError(f"{kind_name}=codex: {command_name} names the program alone (the "
                         "service supplies its arguments)")
    found = shutil.which(program[0]) if resolve else None
    return kind, (str(Path(found).absolute()) if found else program[0],)


def workspace_root(root: str | None, data_dir: Path) -> str | None:
    """``SVC_WORKSPACE_ROOT`` checked against ``/app``, the secret store and the session
    volumes (``ValueError``: the server refuses to start)."""
    if not root:
        return None
    protected = [("the secret store", data_dir / "secrets"),
                 ("the session directories", data_dir / "sessions")]
    return str(check_root_setting(root, protected))


@dataclass(frozen=True)
class RunnerSettings:
    """Where runner jobs live and how they run."""

    data_dir: Path
    driver: str = "local"
    namespace: str = DEFAULT_NAMESPACE
    default_profile: str = "profile-1"
    backend_commands: dict[str, tuple[str, ...]] = field(
        default_factory=lambda: dict.fromkeys(PROFILES, REFERENCE_BACKEND))
    backend_kinds: dict[str, str] = field(
        default_factory=lambda: dict.fromkeys(PROFILES, "reference"))
    """``SVC_BACKEND_KIND_PROFILE_n``: how each profile's command is run (docs/backends.md)."""
    retention: bool = False
    retention_capacity: int = 8
    timeout_budgets: dict[str, str] = field(default_factory=dict)
    faults: frozenset[str] = frozenset()
    defaults: RuntimeDefaults = field(default_factory=RuntimeDefaults)
    storage_class: str = "local-path"
    rollout_subdir: str = "sessions"
    resource_bin_path: str | None = None
    workspace_root: str | None = None
    """``SVC_WORKSPACE_ROOT``: where checkouts go (locally ``<root>/<runnerJobId>/``); unset:
    each local job's ``workspaces/``, a pod's ``/workspace``."""
    kubernetes_api: str | None = None
    session_ttl_s: int = 7 * 24 * 3600
    session_gc_interval_ms: int = 5 * 60 * 1000
    session_sync_interval_ms: int = 1000
    local_sandbox: str = "bwrap"
    """``SVC_LOCAL_SANDBOX``: ``bwrap`` (local backends under bubblewrap) or ``off``."""
    pod_sandbox: str = "bwrap"
    """``SVC_POD_SANDBOX``: ``bwrap`` (a pod's backend under bubblewrap, without the runner's
    token) or ``off`` (for nodes that refuse user namespaces; the backend can then read the
    token and speak for its runner)."""
    runner_api_url: str | None = None
    """``SVC_RUNNER_API_URL``: where runners reach the runner protocol (``svc serve`` sets its
    own address when unset)."""
    runner_api_socket: str | None = None
    """The Unix socket of ``svc serve``'s runner listener (a worker of its own), which local
    runners try before ``runner_api_url``; set by ``svc serve``, not a variable."""
    runner_heartbeat_s: float = 10.0
    """``SVC_RUNNER_HEARTBEAT_S``: how often a runner renews its lease."""
    runner_lease_s: float = 60.0
    """``SVC_RUNNER_LEASE_S``: a run whose last heartbeat is older is lost (``runner-lost``)."""
    runner_start_s: float = 600.0
    """``SVC_RUNNER_START_S``: how much longer than the lease a job may stay silent while its
    driver sees it alive (a pod's container being started: an image pull)."""
    fetch_allow_file_roots: tuple[str, ...] = ()
    """``SVC_FETCH_ALLOW_FILE_ROOTS``: where ``file://`` repositories may lie."""
    fetch_allow_hosts: tuple[str, ...] = ()
    """``SVC_FETCH_ALLOW_HOSTS``: loopback, link-local or metadata hosts runners may fetch
    from."""
    output_max_bytes: int = 64 * 1024 * 1024
    """``SVC_OUTPUT_MAX_BYTES``: what a backend may print in one turn (runner and manager)."""
    max_sessions_per_tenant: int = 100
    """``SVC_MAX_SESSIONS_PER_TENANT``: live sessions a tenant may hold (0: no cap)."""
    backend_loopback_ports: tuple[int, ...] = ()
    """``SVC_BACKEND_LOOPBACK_PORTS``: the host loopback ports sandboxed local backends
    reach (every other one is out of their network namespace's reach)."""
    sandbox_read_only: tuple[str, ...] = ()
    """``SVC_SANDBOX_READ_ONLY``: operator paths every sandboxed backend sees read-only."""
    protected_endpoints: tuple[str, ...] = ()
    """``host:port`` of the service's own TCP endpoints besides the runner API (its
    database): a pod backend's egress proxy never connects there."""

    @property
    def fetch_allow(self) -> FetchAllow:
        """The fetch allow-list the gate, the resolver and every runner job check: the
        settings' roots and hosts, and never the data directory or the workspace root."""
        denied = [str(self.data_dir.resolve())]
        if self.workspace_root:
            denied.append(self.workspace_root)
        return FetchAllow(file_roots=list(self.fetch_allow_file_roots),
                          hosts=list(self.fetch_allow_hosts), denied_roots=denied,
                          protected=list(self.protected_endpoints))

    @property
    def smoke_tools(self) -> tuple[str, ...]:
        """SPEC 8's list in a runner image; ``git`` alone for local processes, unless the
        runtime defaults name the list."""
        configured = self.defaults.smokeTools
        if isinstance(configured, list):
            return tuple(configured)
        return SPEC_SMOKE_TOOLS if self.driver == "kubernetes" else ("git",)

    @property
    def sandbox(self) -> str:
        """How backends are confined (``bwrap`` or ``off``): locally, or in their pods."""
        return self.local_sandbox if self.driver == "local" else self.pod_sandbox

    @property
    def backend_network(self) -> str:
        """The backends' network: ``pasta`` (local, sandboxed: their own namespace, no host
        loopback service but the forwarded ports), ``host`` (local, unsandboxed), ``proxy``
        (Kubernetes, sandboxed: a namespace with only a loopback, out through the runner's
        egress proxy) or ``pod`` (Kubernetes, unsandboxed: the pod's network)."""
        if self.driver != "local":
            return "proxy" if self.pod_sandbox == "bwrap" else "pod"
        return "pasta" if self.local_sandbox == "bwrap" else "host"

    @property
    def secrets_dir(self) -> Path:
        """Root of the file-based secret store."""
        return self.data_dir / "secrets"

    @property
    def sessions_dir(self) -> Path:
        """Where the local driver keeps one directory per session volume."""
        return self.data_dir / "sessions"

    @property
    def jobs_dir(self) -> Path:
        """Where the local driver keeps one directory per runner job."""
        return self.data_dir / "jobs"

"""The server's settings (:class:`ServiceSettings`): read from the environment once at start,
as :data:`api.variables.VARIABLES` declares them, then passed down (to ``svc serve``'s
workers as msgspec JSON)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from api.auth_principal import Grant
from api.variables import SERVER, Variable

if TYPE_CHECKING:
    from api.server import HttpSettings
    from runner_assembly.settings import RunnerSettings


class ServiceSettings(msgspec.Struct, frozen=True, kw_only=True):
    """The server's settings: one attribute per server variable of :data:`VARIABLES`
    (its name less ``SVC_``, in lower case), plus what ``svc serve`` hands its workers."""

    http_keepalive_s: int
    http_header_timeout_s: int
    http_body_timeout_s: int
    http_max_connections: int
    shutdown_grace_s: int
    data_dir: str
    database_url: str | None
    migrate_database_url: str | None
    pgbouncer: bool
    deploy_endpoint: str
    backend_command_profile_1: tuple[str, ...] | None
    backend_command_profile_2: tuple[str, ...] | None
    backend_command_profile_3: tuple[str, ...] | None
    backend_command_profile_4: tuple[str, ...] | None
    default_backend_profile: str
    secret_namespace: str
    runner_driver: str
    local_sandbox: str
    pod_sandbox: str
    kubernetes_api: str | None
    runtime_defaults: str | None
    session_storage_class: str
    backend_rollout_subdir: str
    session_ttl_s: int
    session_gc_interval_ms: int
    session_sync_interval_ms: int
    runner_api_url: str | None
    runner_heartbeat_s: float
    runner_lease_s: float
    runner_start_s: float
    resource_bin_path: str | None
    workspace_root: str | None
    fetch_allow_file_roots: tuple[str, ...]
    fetch_allow_hosts: tuple[str, ...]
    log_level: str
    runner_retention: bool
    runner_capacity: int
    queue_timeout_budgets: dict[str, str]
    faults: frozenset[str]
    fault_seed: int
    backend_kind_profile_1: str | None
    backend_kind_profile_2: str | None
    backend_kind_profile_3: str | None
    backend_kind_profile_4: str | None
    output_max_bytes: int
    max_sessions_per_tenant: int
    backend_loopback_ports: tuple[int, ...] = ()
    admin_key_sha256: str | None = None
    """``SVC_ADMIN_KEY_SHA256``: the operator's own admin key, by its sha256."""
    auth_serviceaccounts: dict[str, Grant] = msgspec.field(default_factory=dict)
    """``SVC_AUTH_SERVICEACCOUNTS``: ``namespace/serviceaccount`` → tenant, roles, projects."""
    auth_oidc_issuer: str | None = None
    auth_oidc_audience: str = "svc"
    auth_oidc_jwks_url: str | None = None
    auth_oidc_claim: str = "svc_roles"
    sandbox_read_only: tuple[str, ...] = ()
    """``SVC_SANDBOX_READ_ONLY``: operator paths every sandboxed backend sees read-only."""
    runner_api_socket: str | None = None
    """Not a variable: the Unix socket of ``svc serve``'s runner listener, for local runners
    (:func:`api.runner_listener.bind`)."""
    runner_listener: bool = False
    """Not a variable: this process is the runner listener's worker, not one of the
    ``--workers N`` (``svc_workers`` does not count it)."""
    ledger_relay: str | None = None
    """Not a variable: where ``svc serve``'s ledger relay listens, for its workers
    (:class:`ledger.relay.RelayAddress`)."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ServiceSettings:
        """The settings from ``env`` (default: this process's environment); an unset or
        empty variable has its default. ``ValueError`` names an invalid one."""
        env = os.environ if env is None else env
        values = {variable.field: _parsed(variable, env.get(variable.name))
                  for variable in SERVER}
        return msgspec.convert(values, cls)

    @classmethod
    def defaults(cls) -> ServiceSettings:
        """Every setting at its default."""
        return cls.from_env({})

    def encode(self) -> bytes:
        """msgspec JSON, for a worker process."""
        return msgspec.json.encode(self)

    @classmethod
    def decode(cls, data: bytes) -> ServiceSettings:
        """The settings :meth:`encode` wrote."""
        return msgspec.json.decode(data, type=cls)

    def data_path(self) -> Path:
        """``SVC_DATA_DIR``, resolved and created if missing."""
        from ledger.database import data_dir

        return data_dir(self.data_dir)

    def http(self) -> HttpSettings:
        """The HTTP server's connection limits."""
        from api.server import HttpSettings

        return HttpSettings(keepalive_s=self.http_keepalive_s,
                            header_timeout_s=self.http_header_timeout_s,
                            body_timeout_s=self.http_body_timeout_s,
                            max_connections=self.http_max_connections,
                            shutdown_grace_s=self.shutdown_grace_s)

    def runner(self, data_dir: Path | None = None) -> RunnerSettings:
        """Where runner jobs live and how they run (data under ``data_dir``, default
        :meth:`data_path`). Reads the runtime defaults file; ``DefaultsError`` or
        ``ValueError`` (a refused workspace root) when it cannot be used."""
        from runner_assembly.assembly.defaults import load_defaults
        from runner_assembly.assembly.profiles import PROFILES
        from runner_assembly.runner.egress import authority, endpoint
        from runner_assembly.settings import RunnerSettings, backend_of, workspace_root

        data = self.data_path() if data_dir is None else data_dir
        backends = {profile: backend_of(
            profile, getattr(self, "backend_kind_" + profile.replace("-", "_")),
            getattr(self, "backend_command_" + profile.replace("-", "_")),
            resolve=self.runner_driver != "kubernetes") for profile in PROFILES}
        commands = {profile: command for profile, (_, command) in backends.items()}
        kinds = {profile: kind for profile, (kind, _) in backends.items()}
        return RunnerSettings(
            data_dir=data, driver=self.runner_driver, namespace=self.secret_namespace,
            default_profile=self.default_backend_profile, backend_commands=commands,
            backend_kinds=kinds,
            retention=self.runner_retention, retention_capacity=self.runner_capacity,
            timeout_budgets=dict(self.queue_timeout_budgets), faults=self.faults,
            defaults=load_defaults(self.runtime_defaults),
            storage_class=self.session_storage_class, rollout_subdir=self.backend_rollout_subdir,
            resource_bin_path=self.resource_bin_path,
            workspace_root=workspace_root(self.workspace_root, data),
            kubernetes_api=self.kubernetes_api, session_ttl_s=self.session_ttl_s,
            session_gc_interval_ms=self.session_gc_interval_ms,
            session_sync_interval_ms=self.session_sync_interval_ms,
            local_sandbox=self.local_sandbox, pod_sandbox=self.pod_sandbox,
            runner_api_url=self.runner_api_url, runner_api_socket=self.runner_api_socket,
            runner_heartbeat_s=self.runner_heartbeat_s,
            runner_lease_s=self.runner_lease_s, runner_start_s=self.runner_start_s,
            fetch_allow_file_roots=self.fetch_allow_file_roots,
            fetch_allow_hosts=self.fetch_allow_hosts, output_max_bytes=self.output_max_bytes,
            max_sessions_per_tenant=self.max_sessions_per_tenant,
            backend_loopback_ports=self.backend_loopback_ports,
            sandbox_read_only=self.sandbox_read_only,
            protected_endpoints=tuple(authority(*found) for found in (
                endpoint(url) for url in (self.database_url, self.migrate_database_url))
                if found is not None))


def _parsed(variable: Variable, value: str | None) -> object:
    assert variable.parse is not None
    return variable.parse(variable.name, value or variable.default)

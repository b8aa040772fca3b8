"""Runner drivers: the protocol, ``local`` (embedded default), ``kubernetes``, fault injection.

The factory lives here, above the driver modules, so that no driver imports another.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runner_assembly.drivers.protocol import DriverError, RunnerDriver

if TYPE_CHECKING:
    from runner_assembly.settings import RunnerSettings

__all__ = ["DRIVERS", "DriverError", "RunnerDriver", "make_driver"]

DRIVERS = ("local", "kubernetes")


def make_driver(settings: RunnerSettings) -> RunnerDriver:
    """The driver ``SVC_RUNNER_DRIVER`` names: ``local`` (default) or ``kubernetes``."""
    if settings.driver == "kubernetes":
        from ledger.states import FailureKind
        from runner_assembly.assembly.names import manager_url
        from runner_assembly.drivers.k8s import KubernetesDriver, api_client
        from runner_assembly.runner.sandbox import mode_error

        if (refused := mode_error("SVC_POD_SANDBOX", settings.pod_sandbox)) is not None:
            raise DriverError(FailureKind.SCHEMA_INVALID, refused)
        runner_env = {"SVC_RUNNER_API_URL": settings.runner_api_url
                      or manager_url(settings.namespace),
                      "SVC_RUNNER_HEARTBEAT_S": str(settings.runner_heartbeat_s),
                      "SVC_POD_SANDBOX": settings.pod_sandbox}
        return KubernetesDriver(api_client(settings.kubernetes_api), settings.namespace,
                                runner_env=runner_env)
    from runner_assembly.drivers.local import LocalDriver

    return LocalDriver(settings.jobs_dir, settings.sessions_dir, settings.local_sandbox,
                       settings.runner_api_url, settings.runner_heartbeat_s, settings.faults,
                       settings.backend_loopback_ports, settings.runner_api_socket)

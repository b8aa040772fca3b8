"""The runner inside a Kubernetes runner job: ``python -m runner_assembly.runner.pod PHASE``.

The job's life is :mod:`runner_assembly.runner.lifecycle`'s, split over the Job's two
containers; what is the pod's is where its files live and how the backend is wrapped. The job
file and the token are files of the mounted per-job Secret (``/var/run/svc/job``); the
runner's scratch is the pod's emptyDir (``/home/svc/.svc``); the manager reads no file of
the pod.

``assemble`` (init container) claims the job's start (a runner that loses the claim leaves a
mark so the backend container starts nothing), runs the assembly steps, sends the bounded
assembly event and writes the launch file (non-secret environment) and the prompt into its
scratch. ``backend`` (main container) heartbeats, starts the backend with that environment
plus the secret references Kubernetes injected -- under bubblewrap, without the per-job
Secret's mount: the runner holds the token in memory only and is not dumpable, so the
backend (same UID) cannot read the token and pose as its runner (:func:`sandboxed`), and in
a network namespace with only a loopback, whose one way out is the runner's egress proxy
(:mod:`runner_assembly.runner.egress`: the model API, never the manager) -- ships
its output (the assembly's trace lines first), then reports the thread, the session storage
summary and its exit. A failure kind is also left as the container's termination message:
the manager's fallback when the exit report could not be delivered.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import json
import os
import signal
import subprocess
import sys
from functools import partial
from pathlib import Path

from ledger.states import FailureKind
from runner_assembly.assembly import names
from runner_assembly.assembly.failures import AssemblyFailure
from runner_assembly.contract.jobfile import JobFile, JobFileRefused
from runner_assembly.contract.messages import ExitBody
from runner_assembly.contract.plan import EnvEntry, SecretUse
from runner_assembly.runner.assemble import Assembler
from runner_assembly.runner.egress import EgressProxy, policy_for
from runner_assembly.runner.layout import Layout
from runner_assembly.runner.lifecycle import MASKER, Lifecycle, connect, read_job
from runner_assembly.runner.manager_client import ManagerRefused
from runner_assembly.runner.masking import Masker
from runner_assembly.runner.projection import SecretSource
from runner_assembly.runner.sandbox import (
    BWRAP,
    OFF,
    SandboxUnavailable,
    check_visible,
    find_bwrap,
    pod_mounts,
    wrap,
)
from runner_assembly.runner.shipping import Heartbeats, Shipper

STATE_DIR = Path(names.POD_STATE_DIR)
NOT_CLAIMED = "not-claimed"
"""Left by an ``assemble`` phase that lost the claim: the backend container starts nothing."""
PR_SET_DUMPABLE = 4
EGRESS_DIR, EGRESS_SOCKET = "egress", "proxy.sock"
"""The backend's egress proxy's socket, in the runner's scratch (bound into the sandbox)."""
MAX_TRACED_REFUSALS = 20
"""Refused egress destinations traced per job (the rest are refused silently)."""


def layout_of(job: JobFile) -> Layout:
    """The pod's directories for this job."""
    volume = job.plan.session_volume
    return Layout(home=Path(names.POD_HOME),
                  workspace_root=Path(job.workspace_root or names.POD_WORKSPACE_ROOT),
                  workspace_key=job.plan.workspace_key,
                  rollout_subdir=volume.rollout_subdir if volume else "sessions")


def lifecycle_of(job_path: Path) -> Lifecycle:
    """The job of the mounted job file, its client with the token mounted next to it."""
    job = read_job(job_path)
    client = connect(job, (job_path.parent / names.RUNNER_TOKEN_KEY).read_text().strip())
    layout = layout_of(job)
    return Lifecycle(job, client, STATE_DIR, layout,
                     layout.session_dir if job.plan.session_volume else None)


def assemble(job_path: Path) -> int:
    """Claim the start and run the assembly steps; 0 when the backend container may go on."""
    life = lifecycle_of(job_path)
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    if not life.claim():
        (STATE_DIR / NOT_CLAIMED).touch()
        return 0
    beats = life.heartbeats()
    assembler = Assembler(life.job, life.layout, SecretSource(Path(names.POD_SECRETS_ROOT),
                                                              MASKER),
                          Path(names.POD_JOB_SPEC_DIR), mounted=True)
    launch = life.assemble(assembler)
    if isinstance(launch, ExitBody):
        return finish(life, beats, launch, life.shipper())
    beats.stop()
    (STATE_DIR / "launch.json").write_text(json.dumps({"env": launch.env}))
    return 0


def backend(job_path: Path) -> int:
    """Run the backend with the launch environment and the injected secret references;
    ship its masked output and report its thread, the storage summary and its exit."""
    if (STATE_DIR / NOT_CLAIMED).exists():
        return 0
    non_dumpable()
    life = lifecycle_of(job_path)
    plan = life.job.plan
    env = dict(json.loads((STATE_DIR / "launch.json").read_text())["env"])
    for entry in plan.env:
        if entry.source != "static" and entry.name in os.environ:
            env[entry.name] = os.environ[entry.name]
    register_pod_secrets(MASKER, plan.env, plan.transient_env.names, plan.secrets, env)
    beats, shipper = life.heartbeats(), life.shipper()
    proxy = None
    try:
        proxy = start_egress(life) if sandbox_mode() != OFF else None
        report = life.run_backend(env, partial(_wrapped, life, env.get("PATH", ""), proxy),
                                  forward_term)
    finally:
        beats.stop()
        if proxy is not None:
            proxy.close()
    return finish(life, beats, report, shipper)


def sandbox_mode() -> str:
    """``SVC_POD_SANDBOX``: ``bwrap`` (the default) or ``off``."""
    return os.environ.get("SVC_POD_SANDBOX") or BWRAP


def _wrapped(life: Lifecycle, path: str, proxy: EgressProxy | None, command: list[str]
             ) -> tuple[list[str], str]:
    """The backend command as the pod runs it: its mounted credentials checked, under
    bubblewrap unless ``SVC_POD_SANDBOX=off`` (its program found on the backend's
    ``path``), its network the egress ``proxy``'s."""
    check_mounted_secrets(life.job.plan.secrets)
    if proxy is None:
        return command, OFF
    return sandboxed(life.job, life.layout, command, path, proxy.path), BWRAP


def start_egress(life: Lifecycle) -> EgressProxy:
    """The backend's egress proxy (:mod:`runner_assembly.runner.egress`) on a Unix socket in
    the runner's scratch: the fetch rules with the job's allow-list, never the service's
    own endpoints (its database, the manager: ``SVC_RUNNER_API_URL``); the first refusals
    traced (host, port and rule)."""
    folder = STATE_DIR / EGRESS_DIR
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = folder / EGRESS_SOCKET
    path.unlink(missing_ok=True)
    policy = policy_for(life.job.fetch_allow, os.environ.get("SVC_RUNNER_API_URL"))
    traced = itertools.count()

    def refused(host: str, port: int, reason: str) -> None:
        if next(traced) < MAX_TRACED_REFUSALS:
            life.trace("egress-refused", host=host, port=port, reason=reason)

    return EgressProxy(path, policy, refused)


def non_dumpable() -> None:
    """``PR_SET_DUMPABLE`` 0: no process of the same UID may read this runner's memory or
    environment (``/proc/<pid>/mem``, ``environ``) nor trace it; it holds the token."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")


def sandboxed(job: JobFile, layout: Layout, command: list[str], path: str = "",
              egress: Path | None = None) -> list[str]:
    """The backend command under bubblewrap: home, workspaces, session volume and volume
    credentials, but not the per-job Secret's mount (the runner token, the job file) and
    not the runner's scratch; with ``egress`` (the proxy's socket), in a network namespace
    of its own whose way out is that proxy. No bwrap, no backend: ``infra-failed`` (never
    unsandboxed); nor when the sandbox does not show the program (found on ``path``)."""
    try:
        bwrap = find_bwrap()
    except SandboxUnavailable as error:
        raise AssemblyFailure(FailureKind.INFRA_FAILED, str(error)) from None
    mounts = pod_mounts(job, layout, STATE_DIR)
    check_visible(command, mounts, path)
    return wrap(bwrap, command, mounts, layout.workspace, egress=egress)


def forward_term(child: subprocess.Popen[bytes]) -> None:
    """Kubernetes stops a container with SIGTERM: the backend gets it too."""
    signal.signal(signal.SIGTERM, lambda signum, frame: child.terminate())


def finish(life: Lifecycle, beats: Heartbeats, report: ExitBody, shipper: Shipper) -> int:
    """Ship the rest of the lines, then report the exit (its kind also as the termination
    message); the container's exit code: 0, or 3 when the job did not complete."""
    beats.stop()
    sent = life.finish(report, shipper, _leave_termination)
    return 0 if sent.state == "completed" else 3


def _leave_termination(report: ExitBody) -> None:
    if report.failure_kind:
        write_termination(report.failure_kind, report.failure_message)


def write_termination(kind: str, message: str | None) -> None:
    """Leave the failure kind where the pod status shows it (the manager's fallback)."""
    path = os.environ.get("SVC_TERMINATION_LOG") or names.TERMINATION_LOG
    with contextlib.suppress(OSError), open(path, "w") as handle:
        handle.write(json.dumps({"failureKind": kind, "failureMessage": str(message)[:400]}))


def check_mounted_secrets(secrets: list[SecretUse]) -> None:
    """A tool credential mounted as a volume (``optional``) must hold all its keys, else the
    job is ``secret-unavailable``, as with the local driver."""
    for use in secrets:
        if use.role == "tool" and use.projection == "volume":
            for key in use.keys:
                if not (Path(str(use.mount_path)) / key).is_file():
                    raise AssemblyFailure(FailureKind.SECRET_UNAVAILABLE,
                                          f"secret {use.name} lacks key {key}")


def register_pod_secrets(masker: Masker, entries: list[EnvEntry], transient: list[str],
                         secrets: list[SecretUse], env: dict[str, str]) -> None:
    """Register what the backend container holds: secret env values, transient env values,
    the profile secret copied into the backend home and the mounted volume credentials."""
    for entry in entries:
        if entry.source == "secret" or entry.name in transient:
            masker.add(env.get(entry.name, ""))
    for use in secrets:
        folder = {"provider": Path(names.POD_BACKEND_HOME),
                  "tool": Path(use.mount_path or "/nonexistent")}.get(use.role)
        if folder is None:
            continue
        for key in use.keys:
            with contextlib.suppress(OSError):
                masker.add_secret_file(key if use.role == "provider" else "",
                                       (folder / key).read_text(errors="replace"))


def main() -> int:
    """Entry point: the phase is the only argument."""
    job_path = Path(os.environ.get("SVC_JOB_SPEC",
                                   f"{names.POD_JOB_SPEC_DIR}/{names.JOB_SPEC_KEY}"))
    phases = {"assemble": assemble, "backend": backend}
    if len(sys.argv) != 2 or sys.argv[1] not in phases:
        print("usage: python -m runner_assembly.runner.pod assemble|backend", file=sys.stderr)
        return 2
    try:
        return phases[sys.argv[1]](job_path)
    except JobFileRefused as refused:
        print(f"the runner cannot run this job: {refused}", file=sys.stderr, flush=True)
        write_termination(FailureKind.INFRA_FAILED, f"the runner cannot run this job: {refused}")
        return 2
    except ManagerRefused as refused:  # e.g. the job was ended under us (cancel, lease)
        print(str(refused), flush=True)
        write_termination(FailureKind.RUNNER_LOST, f"the runner could not report: {refused}")
        return 1


if __name__ == "__main__":
    sys.exit(main())

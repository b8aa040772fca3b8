"""The runner inside a Kubernetes runner job: ``python -m runner_assembly.runner.pod PHASE``.

The same program as the local runner (:mod:`runner_assembly.runner.local`: its masking,
trace, outcome and thread rules), split over the Job's two containers. Both speak the runner
protocol to the manager's Service (``SVC_RUNNER_API_URL`` from the Job's env) with the job's
token, a file of the mounted per-job Secret; the manager reads no file of the pod.

``assemble`` (init container) claims the job's start with its startup event (a runner that
loses the claim leaves a mark so the backend container starts nothing), runs the assembly
steps, sends the bounded assembly event and writes the launch file (non-secret environment
and the prompt) into its own scratch, the pod's emptyDir. ``backend`` (main container)
heartbeats, starts the backend with that environment plus the secret references Kubernetes
injected -- under bubblewrap, without the per-job Secret's mount: the runner holds the token
in memory only and is not dumpable, so the backend (same UID) cannot read the token and pose
as its runner (:func:`sandboxed`) -- writes its output masked by value to scratch files that
the shipper sends in numbered batches (the assembly's trace lines first), then reports the
thread, the session storage summary and its exit. A failure kind is also left as the
container's termination message: the manager's fallback when the exit report could not be
delivered.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import secrets
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

from ledger.states import FailureKind, job_state_of_failure
from runner_assembly.assembly import names
from runner_assembly.assembly.failures import AssemblyFailure
from runner_assembly.runner.assemble import Assembler
from runner_assembly.runner.backend_run import run_relayed
from runner_assembly.runner.jobspec import RunnerSpec
from runner_assembly.runner.launch import check_backend_launch, spawn_failure
from runner_assembly.runner.layout import Layout
from runner_assembly.runner.local import MASKER, _outcome, _thread, now, trace
from runner_assembly.runner.manager_client import ManagerClient, ManagerRefused
from runner_assembly.runner.masking import Masker
from runner_assembly.runner.projection import SecretSource
from runner_assembly.runner.sandbox import (
    BWRAP,
    OFF,
    SandboxUnavailable,
    find_bwrap,
    pod_mounts,
    wrap,
)
from runner_assembly.runner.session_volume import summarize
from runner_assembly.runner.shipping import Heartbeats, Shipper
from runner_assembly.runner.startup import startup_event

STATE_DIR = Path(names.POD_STATE_DIR)
NOT_CLAIMED = "not-claimed"
"""Left by an ``assemble`` phase that lost the claim: the backend container starts nothing."""
PR_SET_DUMPABLE = 4
EXIT_FIELDS = ("state", "exitCode", "failureKind", "failureMessage", "startedAt", "finishedAt")


def layout_of(spec: dict[str, Any]) -> Layout:
    """The pod's directories for this job."""
    plan = spec["plan"]
    volume = plan["sessionVolume"] or {}
    return Layout(home=Path(names.POD_HOME),
                  workspace_root=Path(spec.get("workspace_root") or names.POD_WORKSPACE_ROOT),
                  workspace_key=plan["workspaceKey"],
                  rollout_subdir=volume.get("rolloutSubdir", "sessions"))


def client_of(spec: dict[str, Any], spec_path: Path) -> ManagerClient:
    """The runner protocol client: the Service's URL, the token mounted next to the spec."""
    token = (spec_path.parent / names.RUNNER_TOKEN_KEY).read_text().strip()
    MASKER.add(token)
    return ManagerClient(os.environ["SVC_RUNNER_API_URL"], spec["runner_job_id"], token)


def heartbeats(client: ManagerClient) -> Heartbeats:
    """Lease renewals every ``SVC_RUNNER_HEARTBEAT_S`` (default 10 s)."""
    return Heartbeats(client, float(os.environ.get("SVC_RUNNER_HEARTBEAT_S") or 10))


def assemble(spec_path: Path) -> int:
    """Claim the start and run the assembly steps; 0 when the backend container may go on."""
    spec = json.loads(spec_path.read_text())
    plan = spec["plan"]
    client = client_of(spec, spec_path)
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    startup = startup_event(plan)
    if not client.claim(secrets.token_hex(8), startup):
        (STATE_DIR / NOT_CLAIMED).touch()
        print("another runner claimed this job's start: exiting without starting it",
              flush=True)
        return 0
    trace(STATE_DIR, "runner-started", capability=startup)
    beats = heartbeats(client)
    assembler = Assembler(spec, layout_of(spec), SecretSource(Path(names.POD_SECRETS_ROOT),
                                                              MASKER),
                          Path(names.POD_JOB_SPEC_DIR), mounted=True)
    started = now()
    try:
        launch = assembler.run()
    except AssemblyFailure as failure:
        trace(STATE_DIR, "assembly-failed", failureKind=failure.kind,
              steps=assembler.event["steps"])
        client.assembly(MASKER.mask_json(assembler.bounded_event()))
        return finish(client, beats, {
            "state": job_state_of_failure(failure.kind), "failureKind": failure.kind,
            "failureMessage": failure.message, "startedAt": started, "finishedAt": now()})
    client.assembly(MASKER.mask_json(assembler.bounded_event()))
    beats.stop()
    trace(STATE_DIR, "assembled", steps=assembler.event["steps"])
    (STATE_DIR / "prompt.txt").write_text(launch.stdin)
    (STATE_DIR / "launch.json").write_text(json.dumps({
        "env": launch.env, "command": spec["backend_command"],
        "workspace": launch.env["SVC_WORKSPACE_PATH"]}))
    return 0


def backend(spec_path: Path) -> int:
    """Run the backend with the launch environment and the injected secret references;
    ship its masked output and report its thread, the storage summary and its exit."""
    if (STATE_DIR / NOT_CLAIMED).exists():
        return 0
    non_dumpable()
    spec = json.loads(spec_path.read_text())
    client = client_of(spec, spec_path)
    launch = json.loads((STATE_DIR / "launch.json").read_text())
    env = dict(launch["env"])
    for entry in spec["plan"]["env"]:
        if entry["source"] != "static" and entry["name"] in os.environ:
            env[entry["name"]] = os.environ[entry["name"]]
    register_pod_secrets(MASKER, spec["plan"], env)
    beats, shipper = heartbeats(client), shipper_of(client)
    try:
        report = run_backend(spec, launch, env, client)
    finally:
        beats.stop()
    return finish(client, beats, report, shipper)


def run_backend(spec: dict[str, Any], launch: dict[str, Any], env: dict[str, str],
                client: ManagerClient) -> dict[str, object]:
    """Start the backend, relay its output masked into the scratch channel files; the exit
    report (after the thread and storage summary were sent)."""
    layout, command = layout_of(spec), launch["command"]
    workspace = Path(launch["workspace"])
    try:
        check_backend_launch(command, workspace)
        check_mounted_secrets(spec["plan"])
        mode = os.environ.get("SVC_POD_SANDBOX") or BWRAP
        sandbox = command if mode == OFF else sandboxed(spec, layout, command, workspace)
    except AssemblyFailure as failure:
        return failed(failure)
    thread = spec["plan"].get("thread") or {}
    trace(STATE_DIR, "backend-start", thread=thread.get("mode", "start"),
          threadId=thread.get("threadId"), sandbox=mode)
    started = now()
    try:
        code, finished = run_relayed(sandbox, workspace, env, STATE_DIR, MASKER, forward_term)
    except OSError as error:
        return failed(spawn_failure(error, command, workspace))
    report = {**_outcome(layout, code), "startedAt": started, "finishedAt": finished}
    thread_id = _thread(layout, spec.get("thread_id"))
    trace(STATE_DIR, "backend-exit", exitCode=code, threadId=thread_id, state=report["state"])
    if thread_id:
        client.thread(thread_id, "resume" if spec.get("thread_id") else "start")
    volume = spec["plan"]["sessionVolume"]
    if volume:
        client.storage(spec["session_id"], summarize(layout.session_dir, volume))
    return report


def non_dumpable() -> None:
    """``PR_SET_DUMPABLE`` 0: no process of the same UID may read this runner's memory or
    environment (``/proc/<pid>/mem``, ``environ``) nor trace it; it holds the token."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")


def sandboxed(spec: dict[str, Any], layout: Layout, command: list[str],
              workspace: Path) -> list[str]:
    """The backend command under bubblewrap: home, workspaces, session volume and volume
    credentials, but not the per-job Secret's mount (the runner token, the job spec) and
    not the runner's scratch. No bwrap, no backend: ``infra-failed`` (never unsandboxed)."""
    try:
        bwrap = find_bwrap()
    except SandboxUnavailable as error:
        raise AssemblyFailure(FailureKind.INFRA_FAILED, str(error)) from None
    return wrap(bwrap, command, pod_mounts(cast(RunnerSpec, spec), layout, STATE_DIR),
                workspace)


def forward_term(child: subprocess.Popen[bytes]) -> None:
    """Kubernetes stops a container with SIGTERM: the backend gets it too."""
    signal.signal(signal.SIGTERM, lambda signum, frame: child.terminate())


def failed(failure: AssemblyFailure) -> dict[str, object]:
    """The exit report of a backend that could not start."""
    trace(STATE_DIR, "backend-spawn-failed", failureKind=failure.kind, details=failure.details)
    return {"state": job_state_of_failure(failure.kind), "failureKind": failure.kind,
            "failureMessage": failure.message}


def shipper_of(client: ManagerClient) -> Shipper:
    """The line shipper over this pod's scratch channel files."""
    return Shipper(client, {channel: STATE_DIR / name
                            for channel, name in names.CHANNEL_FILES.items()})


def finish(client: ManagerClient, beats: Heartbeats, report: dict[str, object],
           shipper: Shipper | None = None) -> int:
    """Ship the rest of the lines, then report the exit (its kind also as the termination
    message); the container's exit code: 0, or 3 when the job did not complete."""
    beats.stop()
    report = MASKER.mask_json({key: value for key, value in report.items()
                               if key in EXIT_FIELDS})
    if report.get("failureKind"):
        write_termination(report)
    (shipper or shipper_of(client)).finish()
    client.exit(report)
    return 0 if report["state"] == "completed" else 3


def write_termination(report: dict[str, Any]) -> None:
    """Leave the failure kind where the pod status shows it (the manager's fallback)."""
    path = os.environ.get("SVC_TERMINATION_LOG") or names.TERMINATION_LOG
    with contextlib.suppress(OSError), open(path, "w") as handle:
        handle.write(json.dumps({"failureKind": report.get("failureKind"),
                                 "failureMessage": str(report.get("failureMessage"))[:400]}))


def check_mounted_secrets(plan: dict[str, Any]) -> None:
    """A tool credential mounted as a volume (``optional``) must hold all its keys, else the
    job is ``secret-unavailable``, as with the local driver."""
    for use in plan["secrets"]:
        if use["role"] == "tool" and use.get("projection") == "volume":
            for key in use["keys"]:
                if not (Path(use["mountPath"]) / key).is_file():
                    raise AssemblyFailure(FailureKind.SECRET_UNAVAILABLE,
                                          f"secret {use['name']} lacks key {key}")


def register_pod_secrets(masker: Masker, plan: dict[str, Any], env: dict[str, str]) -> None:
    """Register what the backend container holds: secret env values, transient env values,
    the profile secret copied into the backend home and the mounted volume credentials."""
    transient = set(plan["transientEnv"]["names"])
    for entry in plan["env"]:
        if entry["source"] == "secret" or entry["name"] in transient:
            masker.add(env.get(entry["name"], ""))
    for use in plan["secrets"]:
        folder = {"provider": Path(names.POD_BACKEND_HOME),
                  "tool": Path(use.get("mountPath") or "/nonexistent")}.get(use["role"])
        for key in use["keys"] if folder is not None else ():
            with contextlib.suppress(OSError):
                masker.add_file((folder / key).read_text(errors="replace"))


def main() -> int:
    """Entry point: the phase is the only argument."""
    spec_path = Path(os.environ.get("SVC_JOB_SPEC",
                                    f"{names.POD_JOB_SPEC_DIR}/{names.JOB_SPEC_KEY}"))
    phases = {"assemble": assemble, "backend": backend}
    if len(sys.argv) != 2 or sys.argv[1] not in phases:
        print("usage: python -m runner_assembly.runner.pod assemble|backend", file=sys.stderr)
        return 2
    try:
        return phases[sys.argv[1]](spec_path)
    except ManagerRefused as refused:  # e.g. the job was ended under us (cancel, lease)
        print(str(refused), flush=True)
        write_termination({"failureKind": FailureKind.RUNNER_LOST,
                           "failureMessage": f"the runner could not report: {refused}"})
        return 1


if __name__ == "__main__":
    sys.exit(main())

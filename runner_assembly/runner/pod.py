"""The runner inside a Kubernetes runner job: ``python -m runner_assembly.runner.pod PHASE``.

``assemble`` (init container) runs the assembly steps and writes, into the shared home, the
bounded assembly event and the launch file (non-secret environment and the prompt).
``backend`` (main container) starts the backend with that environment plus the secret
references Kubernetes injected (``secretKeyRef``), named by the plan, and relays its output
masked by value (:mod:`runner_assembly.runner.masking`).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from runner_assembly.assembly import names
from runner_assembly.assembly.failures import AssemblyFailure
from runner_assembly.runner.assemble import Assembler
from runner_assembly.runner.launch import check_backend_launch
from runner_assembly.runner.layout import Layout
from runner_assembly.runner.masking import Masker, Relays
from runner_assembly.runner.projection import SecretSource
from runner_assembly.runner.startup import startup_event

STATE_DIR = Path(names.POD_HOME) / ".svc"


def assemble(spec_path: Path) -> int:
    """Run the assembly steps; 0 when the backend may start."""
    spec = json.loads(spec_path.read_text())
    plan = spec["plan"]
    volume = plan["sessionVolume"] or {}
    layout = Layout(home=Path(names.POD_HOME),
                    workspace_root=Path(spec.get("workspace_root") or names.POD_WORKSPACE_ROOT),
                    workspace_key=plan["workspaceKey"],
                    rollout_subdir=volume.get("rolloutSubdir", "sessions"))
    assembler = Assembler(spec, layout, SecretSource(Path(names.POD_SECRETS_ROOT)),
                          Path(names.POD_JOB_SPEC_DIR), mounted=True)
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    (STATE_DIR / names.STARTUP_FILE).write_text(json.dumps(startup_event(plan)))
    try:
        launch = assembler.run()
    except AssemblyFailure as failure:
        print(json.dumps({"failureKind": failure.kind}), file=sys.stderr)
        return 3
    finally:
        (STATE_DIR / "assembly.json").write_text(json.dumps(assembler.bounded_event()))
    (STATE_DIR / "prompt.txt").write_text(launch.stdin)
    (STATE_DIR / "launch.json").write_text(json.dumps({
        "env": launch.env, "command": spec["backend_command"],
        "workspace": launch.env["SVC_WORKSPACE_PATH"]}))
    return 0


def backend(spec_path: Path) -> int:
    """Run the backend with the launch environment and the injected secret references; its
    output leaves the pod masked by value."""
    plan = json.loads(spec_path.read_text())["plan"]
    launch = json.loads((STATE_DIR / "launch.json").read_text())
    env = dict(launch["env"])
    for entry in plan["env"]:
        if entry["source"] != "static" and entry["name"] in os.environ:
            env[entry["name"]] = os.environ[entry["name"]]
    try:
        check_backend_launch(launch["command"], Path(launch["workspace"]))
    except AssemblyFailure as failure:
        print(json.dumps({"failureKind": failure.kind}), file=sys.stderr)
        return 3
    masker = Masker()
    register_pod_secrets(masker, plan, env)
    with (STATE_DIR / "prompt.txt").open("rb") as stdin, \
            subprocess.Popen(launch["command"], cwd=launch["workspace"], stdin=stdin,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env) as child:
        signal.signal(signal.SIGTERM, lambda signum, frame: child.terminate())
        assert child.stdout is not None and child.stderr is not None
        relays = Relays([(child.stdout, sys.stdout.buffer), (child.stderr, sys.stderr.buffer)],
                        masker)
        code = child.wait()
        relays.join()
    return code if code >= 0 else 128 - code  # killed by a signal: the shell's convention


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
    return phases[sys.argv[1]](spec_path)


if __name__ == "__main__":
    sys.exit(main())

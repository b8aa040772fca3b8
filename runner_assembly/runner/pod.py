"""The runner inside a Kubernetes runner job: ``python -m runner_assembly.runner.pod PHASE``.

``assemble`` (init container) runs the assembly steps and writes, into the shared home, the
bounded assembly event and the launch file (non-secret environment and the prompt).
``backend`` (main container) starts the backend with that environment plus the secret
references Kubernetes injected (``secretKeyRef``), named by the plan.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from runner_assembly.assembly.failures import AssemblyFailure
from runner_assembly.assembly.names import (
    JOB_SPEC_KEY,
    POD_HOME,
    POD_JOB_SPEC_DIR,
    POD_SECRETS_ROOT,
    POD_WORKSPACE_ROOT,
)
from runner_assembly.runner.assemble import Assembler
from runner_assembly.runner.layout import Layout
from runner_assembly.runner.projection import SecretSource

STATE_DIR = Path(POD_HOME) / ".svc"


def assemble(spec_path: Path) -> int:
    """Run the assembly steps; 0 when the backend may start."""
    spec = json.loads(spec_path.read_text())
    plan = spec["plan"]
    volume = plan["sessionVolume"] or {}
    layout = Layout(home=Path(POD_HOME), workspace_root=Path(POD_WORKSPACE_ROOT),
                    workspace_key=plan["workspaceKey"],
                    rollout_subdir=volume.get("rolloutSubdir", "sessions"))
    assembler = Assembler(spec, layout, SecretSource(Path(POD_SECRETS_ROOT)),
                          Path(POD_JOB_SPEC_DIR), mounted=True)
    STATE_DIR.mkdir(parents=True, exist_ok=True)
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
    """Exec the backend with the launch environment and the injected secret references."""
    plan = json.loads(spec_path.read_text())["plan"]
    launch = json.loads((STATE_DIR / "launch.json").read_text())
    env = dict(launch["env"])
    for entry in plan["env"]:
        if entry["source"] != "static" and entry["name"] in os.environ:
            env[entry["name"]] = os.environ[entry["name"]]
    os.chdir(launch["workspace"])
    descriptor = os.open(STATE_DIR / "prompt.txt", os.O_RDONLY)
    os.dup2(descriptor, 0)
    os.execvpe(launch["command"][0], launch["command"], env)


def main() -> int:
    """Entry point: the phase is the only argument."""
    spec_path = Path(os.environ.get("SVC_JOB_SPEC", f"{POD_JOB_SPEC_DIR}/{JOB_SPEC_KEY}"))
    phases = {"assemble": assemble, "backend": backend}
    if len(sys.argv) != 2 or sys.argv[1] not in phases:
        print("usage: python -m runner_assembly.runner.pod assemble|backend", file=sys.stderr)
        return 2
    return phases[sys.argv[1]](spec_path)


if __name__ == "__main__":
    sys.exit(main())

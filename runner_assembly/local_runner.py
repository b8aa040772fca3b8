"""The runner inside a local runner job (a child process of the local driver).

    python -m runner_assembly.local_runner <job-dir>

Runs the runner's assembly steps (:mod:`runner_assembly.runner.assemble`), writes the bounded
assembly event to ``assembly.json``, runs the backend command in the workspace with the
prompt on standard input and an explicit environment, and reports the terminal status in
``status.json``. Secret values are copied, never printed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from ledger.task import BLOCKER_KINDS
from runner_assembly.drivers import BLOCKED, CANCELLED, COMPLETED, FAILED
from runner_assembly.failures import AssemblyFailure
from runner_assembly.local_driver import ASSEMBLY_FILE, JOB_SECRET_DIR, write_json_atomically
from runner_assembly.runner.assemble import Assembler
from runner_assembly.runner.layout import local_layout
from runner_assembly.runner.projection import SecretSource

BLOCKER_FILE = ".svc-blocker"
"""A backend names a SPEC 7 blocker kind in this file (e.g. a missing thread rollout)."""


def run(folder: Path) -> dict[str, Any]:
    """Assemble the job in ``folder``, run its backend; return the status report."""
    spec = json.loads((folder / "spec.json").read_text())
    plan = spec["plan"]
    volume = plan["sessionVolume"] or {}
    layout = local_layout(folder, plan["workspaceKey"], volume.get("rolloutSubdir", "sessions"))
    assembler = Assembler(spec, layout, SecretSource(Path(spec["secret_root"])),
                          folder / JOB_SECRET_DIR)
    try:
        launch = assembler.run()
    except AssemblyFailure as failure:
        return {"state": BLOCKED if failure.kind in BLOCKER_KINDS else FAILED,
                "failureKind": failure.kind, "failureMessage": failure.message}
    finally:
        write_json_atomically(folder / ASSEMBLY_FILE, assembler.bounded_event())
    (folder / "prompt.txt").write_text(launch.stdin)
    try:
        with (folder / "prompt.txt").open("rb") as stdin, \
                (folder / "stdout.log").open("wb") as stdout, \
                (folder / "stderr.log").open("wb") as stderr:
            code = subprocess.call(spec["backend_command"], cwd=layout.workspace, stdin=stdin,
                                   stdout=stdout, stderr=stderr, env=launch.env)
    except OSError as error:
        return {"state": FAILED, "failureKind": "infra-failed",
                "failureMessage": f"backend command could not start: {error.strerror}"}
    blocker = layout.backend_home / BLOCKER_FILE
    if blocker.is_file():
        return {"state": BLOCKED, "exitCode": code,
                "failureKind": blocker.read_text().strip()[:64] or "infra-failed",
                "failureMessage": "the backend reported a blocker"}
    if code == 0:
        return {"state": COMPLETED, "exitCode": 0}
    return {"state": FAILED, "exitCode": code, "failureMessage": f"backend exited with {code}"}


def main() -> int:
    """Entry point of the child process."""
    folder = Path(sys.argv[1])

    def on_term(signum: int, frame: object) -> None:
        write_json_atomically(folder / "status.json", {"state": CANCELLED})
        os._exit(143)

    signal.signal(signal.SIGTERM, on_term)
    report = run(folder)
    if not (folder / "status.json").exists():
        write_json_atomically(folder / "status.json", report)
    return 0


if __name__ == "__main__":
    sys.exit(main())

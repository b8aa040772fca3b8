"""The runner inside a local runner job (a child process of the local driver).

    python -m runner_assembly.local_runner <job-dir>

Projects the profile secret into a per-job ``BACKEND_HOME``, runs the backend command in the
job's workspace with the prompt on standard input and an explicit minimal environment, and
reports the terminal status in ``status.json``. Secret values are copied, never printed.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from runner_assembly.drivers import BLOCKED, CANCELLED, COMPLETED, FAILED
from runner_assembly.local_driver import MINIMAL_PATH, write_json_atomically

BLOCKER_FILE = ".svc-blocker"
"""A backend (or a later assembly step) names a SPEC 7 blocker kind in this file."""


def project_secret(spec: dict[str, Any], home: Path) -> list[str]:
    """Copy the profile secret's keys into ``home`` (0600); return the missing keys."""
    source = Path(spec["secret_dir"])
    missing = []
    for key in spec["secret_keys"]:
        try:
            shutil.copyfile(source / key, home / key)
        except FileNotFoundError:
            missing.append(key)
            continue
        os.chmod(home / key, 0o600)
    return missing


def backend_env(spec: dict[str, Any], home: Path, workspace: Path) -> dict[str, str]:
    """The whole environment of the backend: nothing else is inherited."""
    return {
        "PATH": MINIMAL_PATH, "LANG": "C.UTF-8", "HOME": str(home),
        "BACKEND_HOME": str(home), "SVC_WORKSPACE_PATH": str(workspace),
        "SVC_RUN_ID": spec["run_id"], "SVC_SESSION_ID": spec["session_id"],
        "SVC_BACKEND_PROFILE": spec["backend_profile"],
    }


def run(folder: Path) -> dict[str, Any]:
    """Run the job in ``folder``; return its status report."""
    spec = json.loads((folder / "spec.json").read_text())
    home, workspace = folder / "home", folder / "workspace"
    home.mkdir(mode=0o700, exist_ok=True)
    workspace.mkdir(exist_ok=True)
    missing = project_secret(spec, home)
    if missing:
        return {"state": BLOCKED, "failureKind": "secret-unavailable",
                "failureMessage": f"profile secret keys missing: {', '.join(missing)}"}
    (folder / "prompt.txt").write_text(spec["prompt"])
    try:
        with (folder / "prompt.txt").open("rb") as stdin, \
                (folder / "stdout.log").open("wb") as stdout, \
                (folder / "stderr.log").open("wb") as stderr:
            code = subprocess.call(spec["backend_command"], cwd=workspace, stdin=stdin,
                                   stdout=stdout, stderr=stderr,
                                   env=backend_env(spec, home, workspace))
    except OSError as error:
        return {"state": FAILED, "failureKind": "infra-failed",
                "failureMessage": f"backend command could not start: {error.strerror}"}
    blocker = home / BLOCKER_FILE
    if blocker.is_file():
        return {"state": BLOCKED, "exitCode": code,
                "failureKind": blocker.read_text().strip()[:64] or "infra-failed",
                "failureMessage": "the backend reported an assembly blocker"}
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

"""The runner inside a local runner job (a child process of the local driver).

    python -m runner_assembly.runner.local <job-dir> --secret-root <dir> [--bwrap <path>]
        [--pasta <path> [--loopback-ports <p,q>]]

The job's life is :mod:`runner_assembly.runner.lifecycle`'s; what is local is where its files
live and how the backend is wrapped. Everything lives in the job directory: the job file
(``spec.json``, :mod:`runner_assembly.contract.jobfile`), the job's token (``runner.token``),
the per-job secret (``job-secret/``), the runner's scratch files (``stdout.log``,
``trace.jsonl``, ``prompt.txt``) and the winner's ``pid``, which the driver follows; home and
workspaces below it (or below ``SVC_WORKSPACE_ROOT``). The session volume (a directory) is
linked at ``${BACKEND_HOME}/<rollout_subdir>``. The secret root comes as an argument, never
in the job file; with ``--bwrap`` the backend runs in the job's sandbox
(:mod:`runner_assembly.runner.sandbox`), with ``--pasta`` in its own network namespace
(:mod:`runner_assembly.runner.netns`).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from functools import partial
from pathlib import Path

from runner_assembly.assembly.names import JOB_FILE, JOB_SECRET_DIR, TOKEN_FILE
from runner_assembly.contract.jobfile import JobFile, JobFileRefused
from runner_assembly.contract.messages import ExitBody
from runner_assembly.runner.assemble import Assembler
from runner_assembly.runner.crash import crash_at
from runner_assembly.runner.jobfiles import write_private
from runner_assembly.runner.leftovers import layout_of, remove_secrets
from runner_assembly.runner.lifecycle import MASKER, Lifecycle, connect, read_job
from runner_assembly.runner.manager_client import ManagerRefused
from runner_assembly.runner.network import Network
from runner_assembly.runner.projection import SecretSource
from runner_assembly.runner.sandbox import check_visible, job_mounts, wrap
from runner_assembly.runner.session_volume import link_volume


def run(life: Lifecycle, secret_root: Path, bwrap: str | None = None,
        network: Network | None = None) -> ExitBody:
    """Assemble the job, run its backend (under ``bwrap`` when given, on ``network``); the
    exit report."""
    job, layout = life.job, life.layout
    if job.volume_dir:
        link_volume(layout, Path(job.volume_dir))
    assembler = Assembler(job, layout, SecretSource(secret_root, MASKER),
                          life.scratch / JOB_SECRET_DIR)
    launch = life.assemble(assembler)
    if isinstance(launch, ExitBody):
        return launch
    return life.run_backend(launch.env, partial(_sandboxed, life, bwrap, network,
                                                launch.env.get("PATH", "")))


def _sandboxed(life: Lifecycle, bwrap: str | None, network: Network | None, path: str,
               command: list[str]) -> tuple[list[str], str]:
    """The backend command under the job's bubblewrap sandbox, on its own network when
    given one (as it is without ``bwrap``); ``infra-failed`` when the sandbox does not show
    its program (found on the backend's ``path``)."""
    if bwrap is None:
        return command, "off"
    job, layout = life.job, life.layout
    volume = Path(job.volume_dir) if job.volume_dir else None
    mounts = job_mounts(job, layout, volume)
    check_visible(command, mounts, path)
    return wrap(bwrap, command, mounts, layout.workspace, network=network,
                own_user=True), "bwrap"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="runner_assembly.runner.local")
    parser.add_argument("folder", type=Path)
    parser.add_argument("--secret-root", type=Path, required=True)
    parser.add_argument("--bwrap", default=None)
    parser.add_argument("--pasta", default=None)
    parser.add_argument("--loopback-ports", default="")
    return parser


def network_of(args: argparse.Namespace) -> Network | None:
    """The backend's network from the runner's arguments (None: the runner's own)."""
    if args.pasta is None:
        return None
    ports = tuple(int(port) for port in args.loopback_ports.split(",") if port)
    return Network(args.pasta, ports)


PARSER = _parser()
"""The runner's command line, built at import: a runner forked from the forkserver has it."""


def main(argv: list[str] | None = None) -> int:
    """Entry point of the runner process (``argv``: its arguments, else the command line's)."""
    args = PARSER.parse_args(argv)
    folder: Path = args.folder
    signal.signal(signal.SIGTERM, lambda signum, frame: os._exit(143))
    try:
        job = read_job(folder / JOB_FILE)
    except JobFileRefused as refused:
        print(f"the runner cannot run this job: {refused}", file=sys.stderr, flush=True)
        return 2
    client = connect(job, (folder / TOKEN_FILE).read_text().strip())
    life = Lifecycle(job, client, folder, layout_of(folder, job),
                     Path(job.volume_dir) if job.volume_dir else None)
    try:
        if not life.claim():
            return 0  # the winner's files: a loser removes nothing
        signal.signal(signal.SIGTERM, lambda signum, frame: _stopped(folder, job))
        write_private(folder / "pid", str(os.getpid()))  # the driver follows the winner
        crash_at(life.faults, "runner-crash-after-claim")
        try:
            return _run_claimed(life, args.secret_root, args.bwrap, network_of(args))
        finally:  # again after the exit report, whatever happened before it
            remove_secrets(folder, job)
    except ManagerRefused as refused:  # e.g. the job was ended under us (cancel, lease)
        print(str(refused), flush=True)
        return 1


def _stopped(folder: Path, job: JobFile) -> None:
    """Stopped (a cancel): the job's secret files go, then the runner."""
    try:
        remove_secrets(folder, job)
    finally:
        os._exit(143)


def _run_claimed(life: Lifecycle, secret_root: Path, bwrap: str | None,
                 network: Network | None = None) -> int:
    """Run the claimed job with heartbeats and the line shipper; report its exit."""
    beats = life.heartbeats()

    def sent(channel: str) -> None:
        if channel == "output":
            crash_at(life.faults, "runner-crash-mid-lines")

    shipper = life.shipper(sent)
    try:
        report = run(life, secret_root, bwrap, network)
    finally:
        beats.stop()
    # the backend has ended: its secret files go now (names traced), before the exit report
    life.trace("secrets-removed", files=remove_secrets(life.scratch, life.job))
    life.finish(report, shipper)
    return 0


if __name__ == "__main__":
    sys.exit(main())

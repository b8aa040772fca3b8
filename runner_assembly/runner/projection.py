"""Secret projection inside the runner job: the only place secret values are touched.

The profile secret is copied into the per-run writable ``BACKEND_HOME`` (0600); a volume
tool credential is copied read-only below the home (``/home/svc/...``); an env tool
credential and the per-job secret become environment entries of the backend only. Values
are never logged, returned in a report or written anywhere else, and every value read here
is registered with the job's :class:`~runner_assembly.runner.masking.Masker`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

from ledger.states import FailureKind
from runner_assembly.assembly.failures import AssemblyFailure
from runner_assembly.contract.plan import SecretUse
from runner_assembly.runner.layout import Layout
from runner_assembly.runner.masking import Masker


class SecretSource:
    """Where the runner finds secret keys: ``<root>/<namespace>/<name>/<key>``; every value
    it hands out is registered with ``masker``."""

    def __init__(self, root: Path, masker: Masker | None = None) -> None:
        self.root = root
        self.masker = masker if masker is not None else Masker()

    def folder(self, use: SecretUse) -> Path:
        """The directory of one referenced secret."""
        return self.root / use.namespace / use.name

    def copy(self, use: SecretUse, into: Path, mode: int) -> None:
        """Copy the secret's keys into ``into``; ``secret-unavailable`` if one is missing."""
        into.mkdir(parents=True, exist_ok=True, mode=0o700)
        for key in use.keys:
            try:
                shutil.copyfile(self.folder(use) / key, into / key)
            except FileNotFoundError:
                raise AssemblyFailure(FailureKind.SECRET_UNAVAILABLE,
                                      f"secret {use.name} lacks key {key}") from None
            os.chmod(into / key, mode)
            self.masker.add_file((into / key).read_text(errors="replace"))

    def value(self, use: SecretUse, key: str) -> str:
        """One key's value, for an env projection of the backend only."""
        try:
            value = (self.folder(use) / key).read_text().strip()
        except FileNotFoundError:
            raise AssemblyFailure(FailureKind.SECRET_UNAVAILABLE,
                                  f"secret {use.name} lacks key {key}") from None
        self.masker.add(value)
        return value

    def register(self, use: SecretUse) -> None:
        """Register the keys of a secret the runner does not copy (the repository credential)."""
        for key in use.keys:
            with contextlib.suppress(OSError):
                self.masker.add_file((self.folder(use) / key).read_text(errors="replace"))


def project_profile(secrets: list[SecretUse], source: SecretSource,
                    layout: Layout) -> None:
    """Copy the current profile's secret into the writable backend home."""
    layout.backend_home.mkdir(parents=True, exist_ok=True, mode=0o700)
    for use in secrets:
        if use.role == "provider":
            source.copy(use, layout.backend_home, 0o600)


def project_tools(secrets: list[SecretUse], source: SecretSource,
                  layout: Layout) -> dict[str, str]:
    """Mount volume credentials read-only; return the env credentials for the backend."""
    env: dict[str, str] = {}
    for use in secrets:
        if use.role != "tool":
            continue
        if use.projection == "volume":
            target = layout.home_path(str(use.mount_path))
            source.copy(use, target, 0o400)
            os.chmod(target, 0o500)
        else:
            env[str(use.env_name)] = source.value(use, use.keys[0])
    return env


def repository_credential(secrets: list[SecretUse], source: SecretSource) -> Path | None:
    """The repository credential's directory, used by git's askpass only."""
    use = next((s for s in secrets if s.role == "repository"), None)
    if use is None:
        return None
    source.register(use)
    return source.folder(use)


def per_job_env(job_secret_dir: Path, names: list[str]) -> dict[str, str]:
    """The per-job secret's entries (transient env, endpoint defaults, ``LAB_API_KEY``)."""
    env = {}
    for name in names:
        try:
            env[name] = (job_secret_dir / name).read_text()
        except FileNotFoundError:
            raise AssemblyFailure(FailureKind.SECRET_UNAVAILABLE,
                                  f"per-job secret lacks {name}") from None
    return env

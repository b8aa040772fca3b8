"""Secret projection inside the runner job: the only place secret values are touched.

The profile secret is copied into the per-run writable ``BACKEND_HOME`` (0600); a volume
tool credential is copied read-only below the home (``/home/svc/...``); an env tool
credential and the per-job secret become environment entries of the backend only. Values
are never logged, returned in a report or written anywhere else, and every value read here
is registered with the job's :class:`~runner_assembly.runner.masking.Masker`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from ledger.states import FailureKind
from runner_assembly.assembly import grants
from runner_assembly.assembly.failures import AssemblyFailure
from runner_assembly.contract.plan import SecretUse
from runner_assembly.runner import beneath
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

    def copy(self, use: SecretUse, layout: Layout, into: Path, mode: int) -> None:
        """Copy the secret's keys into ``into`` (below the home: made without following a
        link, DESIGN 13); ``secret-unavailable`` if one is missing, ``workspace-refused`` if
        a link is on the way (the backend planted it: nothing is written through it)."""
        root, relative = layout.anchored(into)
        for key in use.keys:
            try:
                content = (self.folder(use) / key).read_bytes()
            except FileNotFoundError:
                raise AssemblyFailure(FailureKind.SECRET_UNAVAILABLE,
                                      f"secret {use.name} lacks key {key}") from None
            self.masker.add_secret_file(key if use.role == "provider" else "",
                                        content.decode(errors="replace"))
            with refusing(use.name):
                beneath.write_file(root, relative / key, content, mode)

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


@contextlib.contextmanager
def refusing(name: str) -> Iterator[None]:
    """A link the backend planted on the way of a projection: ``workspace-refused`` (the
    input to fix is the session volume), nothing written through it."""
    try:
        yield
    except beneath.Refused as refused:
        raise AssemblyFailure(FailureKind.WORKSPACE_REFUSED,
                              f"{name} not projected: {refused}") from None


def project_profile(secrets: list[SecretUse], source: SecretSource,
                    layout: Layout) -> None:
    """Copy the current profile's secret into the writable backend home (made first)."""
    root, relative = layout.anchored(layout.backend_home)
    with refusing("the backend home"), beneath.directory(root, relative, create=True):
        pass
    for use in secrets:
        if use.role == "provider":
            source.copy(use, layout, layout.backend_home, 0o600)


def project_tools(secrets: list[SecretUse], source: SecretSource,
                  layout: Layout) -> dict[str, str]:
    """Mount volume credentials read-only; return the env credentials for the backend."""
    env: dict[str, str] = {}
    for use in secrets:
        if use.role != "tool":
            continue
        if use.projection == "volume":
            target = layout.home_path(str(use.mount_path))
            source.copy(use, layout, target, 0o400)
            root, relative = layout.anchored(target)
            with refusing(use.name):
                beneath.chmod_directory(root, relative, 0o500)
        else:
            env[str(use.env_name)] = source.value(use, use.keys[0])
    return env


def repository_credential(secrets: list[SecretUse], source: SecretSource,
                          fetch_url: str) -> Path | None:
    """The repository credential's directory, used by git's askpass only, once the fetch
    it goes with (``fetch_url``) is to a granted host over ``https`` or ``ssh``."""
    use = next((s for s in secrets if s.role == "repository"), None)
    if use is None:
        return None
    grants.check_sent(fetch_url, use.hosts or [], use.name)
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

"""Fetching and checking out bundle repositories with real ``git``, defensively.

Clones use the transport even for local paths (``--no-local``: no hard links into, or
symlinks from, someone else's object store), check every object (``fsckObjects``), never
run hooks or follow submodules, and refuse a tree whose symlinks leave the checkout before
any file is written.
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ledger.states import FailureKind
from runner_assembly.assembly import fetch_policy
from runner_assembly.assembly.failures import MINIMAL_PATH, AssemblyFailure
from runner_assembly.contract.jobfile import FetchAllow
from runner_assembly.runner import tree_links

GIT_TIMEOUT_S = 300
SAFE_CONFIG = ("-c", "transfer.fsckObjects=true", "-c", "fetch.fsckObjects=true",
               "-c", "core.hooksPath=/dev/null", "-c", "submodule.recurse=false",
               "-c", "protocol.ext.allow=never", "-c", "core.symlinks=true",
               "-c", "advice.detachedHead=false", "-c", "http.followRedirects=false")
GIT_ENV = {"PATH": MINIMAL_PATH, "LANG": "C.UTF-8",
           "GIT_TERMINAL_PROMPT": "0", "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null"}


def git(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    """Run git with the safe configuration; its stdout. Errors never carry URLs."""
    try:
        done = subprocess.run(["git", *SAFE_CONFIG, *args], cwd=cwd, capture_output=True,
                              text=True, timeout=GIT_TIMEOUT_S, env={**GIT_ENV, **(env or {})},
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise AssemblyFailure(FailureKind.INFRA_FAILED, f"git {args[0]} could not run: "
                              f"{type(error).__name__}") from None
    if done.returncode != 0:
        raise GitError(args[0], done.returncode)
    return done.stdout


class GitError(AssemblyFailure):
    """A git command failed; the message names the subcommand and exit code only."""

    def __init__(self, subcommand: str, code: int) -> None:
        super().__init__(FailureKind.BUNDLE_UNAVAILABLE, f"git {subcommand} exited with {code}")


@contextmanager
def askpass(credential_dir: Path | None) -> Iterator[dict[str, str]]:
    """Environment for git to read the repository credential from files, never from argv
    or the URL; nothing of it reaches the agent's environment."""
    if credential_dir is None:
        yield {}
        return
    with tempfile.TemporaryDirectory(prefix="svc-askpass-") as folder:
        script = Path(folder) / "askpass"
        script.write_text(
            "#!/bin/sh\ncase \"$1\" in\n"
            f"  Username*) cat '{credential_dir}/username' 2>/dev/null || echo x-access-token;;\n"
            f"  *) cat '{credential_dir}/password' 2>/dev/null || "
            f"cat '{credential_dir}/token';;\nesac\n")
        script.chmod(0o700)
        yield {"GIT_ASKPASS": str(script)}


def clone(url: str, dest: Path, credential_dir: Path | None,
          allow: FetchAllow | None = None) -> None:
    """Clone ``url`` into ``dest`` without checking anything out, once the fetch policy
    allows it (checked again here, resolving the host: DNS can change)."""
    fetch_policy.check_fetch(url, allow or FetchAllow(), strict=True)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with askpass(credential_dir) as env:
        git("clone", "--no-local", "--no-checkout", "--quiet", "--", url, str(dest), env=env)


def resolve_commit(repo: Path, ref: str | None, branch: str | None) -> str:
    """The commit of ``ref``, else of ``branch``, else of the remote's HEAD."""
    for wanted in (ref, branch):
        if wanted:
            for candidate in (f"refs/remotes/origin/{wanted}", f"refs/tags/{wanted}", wanted):
                try:
                    return git("rev-parse", "--verify", "--quiet", "--end-of-options",
                               f"{candidate}^{{commit}}", cwd=repo).strip()
                except GitError:
                    continue
            raise AssemblyFailure(FailureKind.BUNDLE_UNAVAILABLE,
                                  f"ref {wanted!r} not found in the bundle repository")
    return git("rev-parse", "--verify", "HEAD^{commit}", cwd=repo).strip()


def pinned(repo: Path, resolved: str, pin: str | None, explicit_ref: bool) -> str:
    """Apply a ``commitId`` pin: it must exist and match an explicitly requested ref."""
    if pin is None:
        return resolved
    try:
        found = git("rev-parse", "--verify", "--quiet", f"{pin}^{{commit}}", cwd=repo).strip()
    except GitError:
        raise AssemblyFailure(FailureKind.BUNDLE_UNAVAILABLE,
                              f"pinned commit {pin} is not in the bundle repository") from None
    if explicit_ref and found != resolved:
        raise AssemblyFailure(FailureKind.BUNDLE_UNAVAILABLE,
                              f"ref resolves to {resolved}, not the pinned commit {pin}")
    return found


def check_symlinks(repo: Path, commit: str) -> None:
    """Refuse a tree with a symlink that leads outside the checkout once every link is
    followed (or anywhere absolute, in a loop, or to a directory that holds it)."""
    listing = git("ls-tree", "-r", "-z", "--full-tree", commit, cwd=repo)
    links = {}
    for entry in filter(None, listing.split("\0")):
        meta, path = entry.split("\t", 1)
        mode, _, blob = meta.split(" ")
        if mode == "120000":
            links[path] = git("cat-file", "blob", blob, cwd=repo)
    refused = tree_links.refused_link(links)
    if refused is not None:
        raise AssemblyFailure(FailureKind.SCHEMA_INVALID,
                              f"bundle symlink {refused} points outside the checkout")


def checkout(repo: Path, commit: str) -> str:
    """Check out ``commit`` detached; return its tree hash."""
    check_symlinks(repo, commit)
    git("checkout", "--quiet", "--detach", commit, cwd=repo)
    return git("rev-parse", f"{commit}^{{tree}}", cwd=repo).strip()


def inside(root: Path, relative: str) -> Path:
    """``root/relative``, resolved, refused unless it stays inside ``root``."""
    resolved_root = root.resolve()
    candidate = (resolved_root / relative).resolve()
    if candidate != resolved_root and resolved_root not in candidate.parents:
        raise AssemblyFailure(FailureKind.SCHEMA_INVALID, f"path {relative} leaves its root")
    return candidate

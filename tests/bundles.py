"""Real git repositories for assembly tests, created with real ``git``."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

GIT_ENV = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid",
           "GIT_CONFIG_GLOBAL": "/dev/null"}
SYSTEM_PROMPT = "You are the bundle's system prompt: keep changes small.\n"
TOOL = "#!/bin/sh\necho \"{name} ran in $SVC_WORKSPACE_PATH\"\n"
SKILL = "---\nname: {name}\ndescription: {name} helps with one thing\n---\n# {name}\nbody\n"


def git(repo: Path, *args: str) -> str:
    """Run git in ``repo``; its stdout."""
    return subprocess.run(["git", *args], cwd=repo, env=GIT_ENV, check=True,
                          capture_output=True, text=True).stdout.strip()


def make_bundle_repo(root: Path, *, skills: tuple[str, ...] = ("review", "deploy"),
                     tools: tuple[str, ...] = ("tran", "trans", "apply_patch", "lint"),
                     extra: dict[str, str] | None = None,
                     links: dict[str, str] | None = None) -> Path:
    """A repository with ``tools/``, ``skills/<name>/SKILL.md``, prompts and code."""
    repo = root / "bundle-repo"
    repo.mkdir(parents=True)
    git(repo, "init", "--quiet", "--initial-branch=main")
    files = {"README.md": "# bundle\n", "src/app.py": "print('app')\n",
             "prompts/system.md": SYSTEM_PROMPT, **(extra or {})}
    files.update({f"tools/{name}": TOOL.format(name=name) for name in tools})
    files.update({f"skills/{name}/SKILL.md": SKILL.format(name=name) for name in skills})
    for path, text in files.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    for path, target in (links or {}).items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, repo / path)
    git(repo, "add", "-A")
    git(repo, "commit", "--quiet", "-m", "bundle")
    return repo


def commit_on_branch(repo: Path, branch: str, path: str, text: str) -> str:
    """Add a commit on a new branch (leaving main checked out); its hash."""
    git(repo, "checkout", "--quiet", "-b", branch)
    (repo / path).parent.mkdir(parents=True, exist_ok=True)
    (repo / path).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "--quiet", "-m", f"on {branch}")
    head = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "--quiet", "main")
    return head


def bundle_ref(repo: Path, **overrides: Any) -> dict[str, Any]:
    """A resourceBundleRef naming ``repo`` with a required prompt and two required skills."""
    ref: dict[str, Any] = {
        "kind": "gitbundle", "repoUrl": repo.as_uri(),
        "promptRefs": [{"name": "system", "path": "prompts/system.md", "required": True}],
        "requiredSkills": [{"name": "review"}, {"name": "deploy"}],
    }
    ref.update(overrides)
    return ref


BACKEND = '''
import hashlib, os, shutil, subprocess, sys
prompt = sys.stdin.read()
if os.environ.get("SVC_THREAD_ID"):  # confirms the resume (docs/backends.md)
    open(os.path.join(os.environ["BACKEND_HOME"], ".svc-thread"), "w").write(
        os.environ["SVC_THREAD_ID"])
print("PROMPT<<" + prompt + ">>")
for tool in ("tran", "lint"):
    if shutil.which(tool):
        print(subprocess.run([tool], capture_output=True, text=True).stdout.strip())
if os.environ["SVC_SKILLS_DIRS"]:
    print("SKILLS " + " ".join(sorted(os.listdir(os.environ["SVC_SKILLS_DIRS"]))))
print("ENV " + " ".join(sorted(os.environ)))
for name in ("GIT_HOST_TOKEN", "LAB_API_KEY", "EXT_MAIN_SERVER_HOST"):
    if name in os.environ:
        print(name + "-sha256 " + hashlib.sha256(os.environ[name].encode()).hexdigest())
ssh = os.path.join(os.environ["HOME"], ".ssh")
if os.path.isdir(ssh):
    modes = sorted({oct(os.stat(os.path.join(ssh, f)).st_mode & 0o777) for f in os.listdir(ssh)})
    print("SSH " + " ".join(sorted(os.listdir(ssh))) + " dir=" + oct(os.stat(ssh).st_mode & 0o777)
          + " files=" + ",".join(modes))
'''


def backend_command(python: str) -> tuple[str, ...]:
    """A backend that reports what assembly gave it (hashes, never values)."""
    return (python, "-c", BACKEND)

"""The runner's half of the SPEC 9 assembly order, ending with what the backend starts with.

project the profile secret → project tool credentials → materialise the bundle → copy
bundles, prepare tools, discover skills → validate required skills → read and validate
prompts → smoke check and capability gaps → write the bounded assembly event. Any step may
fail with a SPEC 7 ``failureKind``; the event then records how far assembly got and why.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from ledger.redaction import redact
from runner_assembly.assembly import workspace_root
from runner_assembly.assembly.failures import MINIMAL_PATH, AssemblyFailure
from runner_assembly.contract.jobfile import JobFile
from runner_assembly.contract.plan import BundleSummary, SessionVolume
from runner_assembly.runner import capabilities, projection, smoke
from runner_assembly.runner.layout import Layout

if TYPE_CHECKING:  # bundle and prompts (git, shutil, lzma) load only for a bundle job
    from runner_assembly.runner import bundle

MAX_EVENT_BYTES = 64 * 1024


@dataclass(frozen=True)
class Launch:
    """How the backend starts: its whole environment and its standard input."""

    env: dict[str, str]
    stdin: str


class Assembler:
    """Runs the assembly steps for one job and keeps the event they build."""

    def __init__(self, job: JobFile, layout: Layout, secrets: projection.SecretSource,
                 job_secret_dir: Path, *, mounted: bool = False) -> None:
        """``mounted``: the platform already mounts volume credentials and injects env
        credentials (a Kubernetes pod); otherwise the runner projects them itself."""
        self.mounted = mounted
        self.job = job
        self.plan = job.plan
        self.layout = layout
        self.secrets = secrets
        self.masker = secrets.masker
        self.job_secret_dir = job_secret_dir
        self.event = self._initial_event()

    def _initial_event(self) -> dict[str, Any]:
        plan = self.plan
        uses = plan.secrets
        return {
            "image": msgspec.to_builtins(plan.image), "profile": plan.backend_profile,
            "profileSecret": next(({"name": s.name, "keys": s.keys} for s in uses
                                   if s.role == "provider"), None),
            "toolCredentials": [{k: v for k, v in msgspec.to_builtins(s).items() if k != "role"}
                                for s in uses if s.role == "tool"],
            "sessionRef": _session_ref(plan.session_volume),
            "sessionVolume": msgspec.to_builtins(plan.session_volume),
            "thread": msgspec.to_builtins(plan.thread),
            "repository": None, "bundles": [], "workspace": None, "managedOverlay": None,
            "promptRefs": [], "requiredSkills": [], "skills": [], "tools": [], "skillDirs": [],
            "smoke": [], "capabilityGaps": [],
            "transientEnv": msgspec.to_builtins(plan.transient_env),
            "capability": plan.capability,
            "steps": [], "valuesPrinted": False,
        }

    def run(self) -> Launch:
        """All steps in order; raises :class:`AssemblyFailure` and records it in the event."""
        try:
            return self._steps()
        except AssemblyFailure as failure:
            self.event["failure"] = {"kind": failure.kind, "message": failure.message,
                                     "details": failure.details}
            raise

    def _step(self, name: str) -> None:
        self.event["steps"].append(name)

    def _steps(self) -> Launch:
        layout, plan = self.layout, self.plan
        self._step("project-profile-secret")
        projection.project_profile(plan.secrets, self.secrets, layout)
        self._step("project-tool-credentials")
        tool_env = {} if self.mounted else projection.project_tools(
            plan.secrets, self.secrets, layout)
        self._step("check-workspace")
        workspace_root.check_checkout(layout.workspace, layout.workspace_root,
                                      self._protected())
        layout.workspace_root.mkdir(parents=True, exist_ok=True)
        summary = plan.resource_bundle
        if summary is not None:
            path, skill_dirs, stdin, tools_bundle = self._bundle(summary)
        else:
            path, skill_dirs, stdin, tools_bundle = MINIMAL_PATH, "", self.job.prompt, False
            layout.workspace.mkdir(parents=True, exist_ok=True)
            self.event["workspace"] = str(layout.workspace)
        self._step("smoke-check")
        found = smoke.probe(plan.smoke_tools, path, tools_bundle)
        self.event["smoke"] = found
        self.event["capabilityGaps"] = capabilities.capability_gaps(plan.secrets, found, path)
        smoke.require(found, self.event["capabilityGaps"])
        env = self._backend_env(path, skill_dirs)
        env.update(tool_env)
        if not self.mounted:
            job_env = projection.per_job_env(self.job_secret_dir, plan.per_job_secret.keys)
            self.masker.add_all(job_env[name] for name in plan.transient_env.names
                                if name in job_env)
            env.update(job_env)
        self._step("start-backend")
        return Launch(env=env, stdin=stdin)

    def _bundle(self, summary: BundleSummary) -> tuple[str, str, str, bool]:
        """Materialise the bundle, check its skills and read its prompts: the backend's
        PATH, its skill directories, its standard input and whether the bundle has tools."""
        from runner_assembly.runner import bundle, prompts  # lazy: start-up cost

        layout, job = self.layout, self.job
        self._step("materialize-bundle")
        fetch_of = {f.repo_url: f.fetch_repo_url for f in summary.fetches}
        made = bundle.materialize(summary, layout, projection.repository_credential(
            self.plan.secrets, self.secrets, fetch_of.get(summary.repo_url, summary.repo_url)),
            job.fetch_allow)
        self._record_bundle(summary, made)
        self._step("validate-required-skills")
        bundle.check_required_skills(made, summary.required_skills)
        self._step("read-prompts")
        read = prompts.read_prompts(summary.prompt_refs, layout.workspace,
                                    new_thread=job.new_thread,
                                    max_bytes=job.prompt_caps.per_prompt,
                                    max_total=job.prompt_caps.total)
        self.event["promptRefs"] = read.entries
        stdin = f"{read.injected_text}\n\n{job.prompt}" if read.injected_text else job.prompt
        path = self._tool_path(made) + ":" + MINIMAL_PATH if made.tool_dir else MINIMAL_PATH
        return (path, ":".join(str(d) for d in made.skill_dirs), stdin,
                made.tool_dir is not None)

    def _protected(self) -> list[workspace_root.Protected]:
        """What no checkout may overwrite: the secret projection, the runtime home and the
        session directory (``/app`` is always protected)."""
        layout = self.layout
        protected = [("the secret projection", self.secrets.root),
                     ("the secret projection", self.job_secret_dir),
                     ("the runtime home", layout.backend_home),
                     ("the session directory", layout.session_dir)]
        protected += [("the secret projection", layout.home_path(str(use.mount_path)))
                      for use in self.plan.secrets
                      if use.role == "tool" and use.projection == "volume"]
        if self.job.volume_dir:
            protected.append(("the session directory", Path(self.job.volume_dir)))
        return protected

    def _record_bundle(self, summary: BundleSummary, made: bundle.Materialized) -> None:
        self.event.update({
            "repository": {"repoUrl": summary.repo_url, "requestedRef": summary.ref,
                           "requestedCommit": summary.commit_id, "branch": summary.branch,
                           "fetches": msgspec.to_builtins(summary.fetches),
                           "materializedCommit": made.commit,
                           "checkoutTree": made.tree},
            "bundles": made.bundles, "workspace": str(self.layout.workspace),
            "managedOverlay": str(self.layout.overlay), "tools": made.tools,
            "skills": made.skills, "skillDirs": [str(d) for d in made.skill_dirs],
            "requiredSkills": summary.required_skills,
        })

    def _tool_path(self, made: bundle.Materialized) -> str:
        """The overlay's tool directory, or only shims in ``SVC_RESOURCE_BIN_PATH``."""
        assert made.tool_dir is not None
        bin_path = self.job.resource_bin_path
        if not bin_path:
            return str(made.tool_dir)
        shims = Path(bin_path)
        shims.mkdir(parents=True, exist_ok=True)
        for tool in made.tools:
            if tool["executable"]:
                name = str(tool["name"])
                shim = shims / name
                shim.write_text(f"#!/bin/sh\nexec {shlex.quote(str(made.tool_dir / name))} "
                                '"$@"\n')
                shim.chmod(0o755)
        return str(shims)

    def _backend_env(self, path: str, skill_dirs: str) -> dict[str, str]:
        """The explicit environment: exactly the plan's static names, nothing inherited."""
        plan, layout = self.plan, self.layout
        env = {
            "PATH": path, "LANG": "C.UTF-8", "HOME": str(layout.home),
            "BACKEND_HOME": str(layout.backend_home), "SVC_WORKSPACE_PATH": str(layout.workspace),
            "SVC_RUN_ID": plan.ids.run_id, "SVC_SESSION_ID": self.job.session_id,
            "SVC_BACKEND_PROFILE": plan.backend_profile, "SVC_SKILLS_DIRS": skill_dirs,
        }
        thread_id = self.job.thread_id
        if thread_id:
            env["SVC_THREAD_ID"] = thread_id
        volume = plan.session_volume
        if volume is not None:
            layout.session_dir.mkdir(parents=True, exist_ok=True)
            env.update({"SVC_SESSION_PVC_NAME": volume.pvc_name,
                        "SVC_SESSION_PVC_NAMESPACE": volume.namespace,
                        "SVC_SESSION_PVC_MOUNT_PATH": str(layout.session_dir),
                        "SVC_BACKEND_ROLLOUT_SUBDIR": volume.rollout_subdir})
        return env

    def bounded_event(self) -> dict[str, Any]:
        """The event as written: masked by value, redacted, and cut to its bound by dropping
        long lists."""
        event: dict[str, Any] = redact(self.masker.mask_json(self.event))
        for key in ("tools", "skills", "bundles", "smoke"):
            if len(json.dumps(event)) <= MAX_EVENT_BYTES:
                break
            event[key] = event[key][:10]
            event["truncatedLists"] = [*event.get("truncatedLists", []), key]
        return event


def _session_ref(volume: SessionVolume | None) -> dict[str, str | None] | None:
    if volume is None:
        return None
    return {"sessionId": volume.session_id, "conversationId": volume.conversation_id,
            "threadId": volume.thread_id}

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

from ledger.redaction import redact
from runner_assembly.assembly import workspace_root
from runner_assembly.assembly.failures import MINIMAL_PATH, AssemblyFailure
from runner_assembly.runner import capabilities, projection, smoke
from runner_assembly.runner.jobspec import BundleSpec, PlanSpec, RunnerSpec, SessionVolumeSpec
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

    def __init__(self, spec: RunnerSpec, layout: Layout, secrets: projection.SecretSource,
                 job_secret_dir: Path, *, mounted: bool = False) -> None:
        """``mounted``: the platform already mounts volume credentials and injects env
        credentials (a Kubernetes pod); otherwise the runner projects them itself."""
        self.mounted = mounted
        self.spec = spec
        self.plan: PlanSpec = spec["plan"]
        self.layout = layout
        self.secrets = secrets
        self.masker = secrets.masker
        self.job_secret_dir = job_secret_dir
        self.event = self._initial_event()

    def _initial_event(self) -> dict[str, Any]:
        plan = self.plan
        uses = plan["secrets"]
        return {
            "image": plan["image"], "profile": plan["backendProfile"],
            "profileSecret": next(({"name": s["name"], "keys": s["keys"]} for s in uses
                                   if s["role"] == "provider"), None),
            "toolCredentials": [{k: v for k, v in s.items() if k != "role"}
                                for s in uses if s["role"] == "tool"],
            "sessionRef": _session_ref(plan["sessionVolume"]),
            "sessionVolume": plan["sessionVolume"], "thread": plan.get("thread"),
            "repository": None, "bundles": [], "workspace": None, "managedOverlay": None,
            "promptRefs": [], "requiredSkills": [], "skills": [], "tools": [], "skillDirs": [],
            "smoke": [], "capabilityGaps": [], "transientEnv": plan["transientEnv"],
            "capability": plan["capability"],
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
        projection.project_profile(plan["secrets"], self.secrets, layout)
        self._step("project-tool-credentials")
        tool_env = {} if self.mounted else projection.project_tools(
            plan["secrets"], self.secrets, layout)
        self._step("check-workspace")
        workspace_root.check_checkout(layout.workspace, layout.workspace_root,
                                      self._protected())
        layout.workspace_root.mkdir(parents=True, exist_ok=True)
        path, skill_dirs, stdin = MINIMAL_PATH, "", self.spec["prompt"]
        summary = plan["resourceBundle"]
        tools_bundle = False
        if summary is not None:
            from runner_assembly.runner import bundle, prompts  # lazy: start-up cost

            self._step("materialize-bundle")
            made = bundle.materialize(summary, layout,
                                      projection.repository_credential(plan["secrets"],
                                                                       self.secrets))
            self._record_bundle(summary, made)
            self._step("validate-required-skills")
            bundle.check_required_skills(made, summary["requiredSkills"])
            self._step("read-prompts")
            caps = self.spec["prompt_caps"]
            read = prompts.read_prompts(summary["promptRefs"], layout.workspace,
                                        new_thread=self.spec["new_thread"],
                                        max_bytes=caps["perPrompt"], max_total=caps["total"])
            self.event["promptRefs"] = read.entries
            if read.injected_text:
                stdin = f"{read.injected_text}\n\n{stdin}"
            path = self._tool_path(made) + ":" + MINIMAL_PATH if made.tool_dir else path
            tools_bundle = made.tool_dir is not None
            skill_dirs = ":".join(str(d) for d in made.skill_dirs)
        else:
            layout.workspace.mkdir(parents=True, exist_ok=True)
            self.event["workspace"] = str(layout.workspace)
        self._step("smoke-check")
        found = smoke.probe(plan["smokeTools"], path, tools_bundle)
        self.event["smoke"] = found
        self.event["capabilityGaps"] = capabilities.capability_gaps(plan["secrets"], found, path)
        smoke.require(found, self.event["capabilityGaps"])
        env = self._backend_env(path, skill_dirs)
        env.update(tool_env)
        if not self.mounted:
            job_env = projection.per_job_env(self.job_secret_dir, plan["perJobSecret"]["keys"])
            self.masker.add_all(job_env[name] for name in plan["transientEnv"]["names"]
                                if name in job_env)
            env.update(job_env)
        self._step("start-backend")
        return Launch(env=env, stdin=stdin)

    def _protected(self) -> list[workspace_root.Protected]:
        """What no checkout may overwrite: the secret projection, the runtime home and the
        session directory (``/app`` is always protected)."""
        layout = self.layout
        protected = [("the secret projection", self.secrets.root),
                     ("the secret projection", self.job_secret_dir),
                     ("the runtime home", layout.backend_home),
                     ("the session directory", layout.session_dir)]
        protected += [("the secret projection", layout.home_path(use["mountPath"]))
                      for use in self.plan["secrets"]
                      if use["role"] == "tool" and use["projection"] == "volume"]
        if self.spec.get("volume_dir"):
            protected.append(("the session directory", Path(self.spec["volume_dir"])))
        return protected

    def _record_bundle(self, summary: BundleSpec, made: bundle.Materialized) -> None:
        self.event.update({
            "repository": {"repoUrl": summary["repoUrl"], "requestedRef": summary["ref"],
                           "requestedCommit": summary["commitId"], "branch": summary["branch"],
                           "fetches": summary["fetches"], "materializedCommit": made.commit,
                           "checkoutTree": made.tree},
            "bundles": made.bundles, "workspace": str(self.layout.workspace),
            "managedOverlay": str(self.layout.overlay), "tools": made.tools,
            "skills": made.skills, "skillDirs": [str(d) for d in made.skill_dirs],
            "requiredSkills": summary["requiredSkills"],
        })

    def _tool_path(self, made: bundle.Materialized) -> str:
        """The overlay's tool directory, or only shims in ``SVC_RESOURCE_BIN_PATH``."""
        assert made.tool_dir is not None
        bin_path = self.spec.get("resource_bin_path")
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
            "SVC_RUN_ID": plan["ids"]["runId"], "SVC_SESSION_ID": self.spec["session_id"],
            "SVC_BACKEND_PROFILE": plan["backendProfile"], "SVC_SKILLS_DIRS": skill_dirs,
        }
        thread_id = self.spec.get("thread_id")
        if thread_id:
            env["SVC_THREAD_ID"] = thread_id
        volume = plan["sessionVolume"]
        if volume is not None:
            layout.session_dir.mkdir(parents=True, exist_ok=True)
            env.update({"SVC_SESSION_PVC_NAME": volume["pvcName"],
                        "SVC_SESSION_PVC_NAMESPACE": volume["namespace"],
                        "SVC_SESSION_PVC_MOUNT_PATH": str(layout.session_dir),
                        "SVC_BACKEND_ROLLOUT_SUBDIR": volume["rolloutSubdir"]})
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


def _session_ref(volume: SessionVolumeSpec | None) -> dict[str, str | None] | None:
    if volume is None:
        return None
    return {"sessionId": volume["sessionId"], "conversationId": volume["conversationId"],
            "threadId": volume["threadId"]}

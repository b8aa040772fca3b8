"""The job file (issue 24 item 2): one versioned msgspec type that the manager's drivers write
and the runner reads, every field carried both ways; an unknown version is refused with a
clear failure, and no secret value or token is ever in it."""

from __future__ import annotations

import base64
import signal
from pathlib import Path
from typing import Any

import msgspec
import pytest

from runner_assembly.assembly import model
from runner_assembly.assembly.names import JOB_FILE, JOB_SPEC_KEY
from runner_assembly.contract import jobfile
from runner_assembly.contract.jobfile import FetchAllow, JobFile, JobFileRefused, PromptCaps
from runner_assembly.contract.plan import (
    BundleItem,
    BundleSummary,
    EnvEntry,
    Ids,
    ImageResolution,
    NamesSummary,
    PerJobSecret,
    PlanThread,
    PromptItem,
    RepositoryFetch,
    RunnerJobPlan,
    SecretUse,
    SessionVolume,
)
from runner_assembly.drivers import DriverError
from runner_assembly.drivers.k8s import secret_data
from runner_assembly.drivers.local import LocalDriver
from runner_assembly.drivers.protocol import JobSpec
from runner_assembly.runner import local
from runner_assembly.runner.lifecycle import read_job

SECRET_VALUE = "per-job-secret-value-5d1c"
TOKEN = "job_01full.token-value-8e2b"


def full_plan() -> RunnerJobPlan:
    """A plan in which every field, to the leaves, differs from its default."""
    return RunnerJobPlan(
        job_name="svc-v01-job-01full", namespace="svc-v01", driver="local",
        ids=Ids(task_id="tsk_1", attempt_id="att_1", run_id="run_1", command_id="cmd_1",
                runner_job_id="job_01full"),
        backend_profile="profile-2",
        image=ImageResolution(source={"kind": "env-image-dockerfile"}, environment_id="env_1",
                              image="registry/image@sha256:" + "a" * 64, status="reused"),
        env=[EnvEntry(name="LAB_API_KEY", source="per-job-secret",
                      secret_name="svc-v01-job-01full-env", key="LAB_API_KEY")],
        secrets=[SecretUse(role="tool", name="git-host", namespace="svc", keys=["token"],
                           projection="volume", tool="git-host", purpose="pull-request",
                           env_name="GIT_HOST_TOKEN", mount_path="/home/svc/.config/gh",
                           read_only=False, hosts=["git.acme.example"])],
        per_job_secret=PerJobSecret(name="svc-v01-job-01full-env", keys=["LAB_API_KEY"],
                                    owned_by_job=False),
        session_volume=SessionVolume(session_id="ses_1", conversation_id="cnv_1",
                                     thread_id="thr_1", pvc_name="svc-v01-session-ses-1",
                                     namespace="svc-v01", rollout_subdir="rollouts",
                                     size="2Gi", storage_class="fast", values_printed=True),
        workspace_key="0123456789abcdef",
        resource_bundle=BundleSummary(
            repo_url="https://git.example/bundle", ref="main", commit_id="b" * 40,
            branch="work",
            bundles=[BundleItem(subpath="tools", target_path="tools", name="tools",
                                repo_url="https://git.example/other", ref="v1",
                                commit_id="c" * 40)],
            prompt_refs=[PromptItem(name="intro", path="prompts/intro.md", inject="always",
                                    required=True)],
            required_skills=["review"], credential="repo-credential",
            fetches=[RepositoryFetch(repo_url="https://git.example/bundle",
                                     fetch_repo_url="https://mirror.example/bundle",
                                     mirror_used=True, mirror_base_url="https://mirror.example")]),
        transient_env=NamesSummary(names=["LAB_API_KEY"], count=1, sha256="d" * 64),
        endpoint_defaults=["EXT_SSH_ENDPOINT"], smoke_tools=["git", "rg"],
        capability={"version": "1"}, thread=PlanThread(mode="resume", thread_id="thr_1"),
        provider_id="provider-1", values_printed=True, active_deadline_seconds=2100)


def full_job(**local_fields: Any) -> JobFile:
    """A job file with every field set to something that is not its default."""
    fields: dict[str, Any] = {
        "runner_job_id": "job_01full", "run_id": "run_1", "task_id": "tsk_1",
        "attempt_id": "att_1", "session_id": "ses_1", "backend_profile": "profile-2",
        "backend_command": ["agent", "--flag"], "backend_kind": "reference",
        "sandbox_read_only": ["/opt/agent"],
        "prompt": "do the work", "plan": full_plan(),
        "prompt_caps": PromptCaps(per_prompt=1000, total=5000), "new_thread": False,
        "thread_id": "thr_1", "resource_bin_path": "/opt/bin",
        "workspace_root": "/srv/workspaces", "volume_dir": "/srv/sessions/ses_1",
        "faults": ["runner-crash-before-exit"],
        "fetch_allow": FetchAllow(file_roots=["/srv/git"], hosts=["127.0.0.1:3000"],
                                  denied_roots=["/srv/data"], protected=["db.svc:5432"]),
        "output_max_bytes": 1_000_000, "manager_silence_s": 90.0}
    return JobFile(**{**fields, **local_fields})


def defaulted(value: object, where: str = "job") -> list[str]:
    """Every field below ``value`` that holds its default (a test that would miss it)."""
    if isinstance(value, list):
        return [name for index, item in enumerate(value)
                for name in defaulted(item, f"{where}[{index}]")]
    if not isinstance(value, msgspec.Struct):
        return []
    found = []
    for field in msgspec.structs.fields(value):
        held = getattr(value, field.name)
        default = field.default_factory() if field.default_factory is not msgspec.NODEFAULT \
            else field.default
        if held == default or held in (None, [], {}):
            found.append(f"{where}.{field.name}")
        found += defaulted(held, f"{where}.{field.name}")
    return found


def spec_of(job: JobFile) -> JobSpec:
    return JobSpec(job=job, secret_root="/srv/secrets", job_secret={"LAB_API_KEY": SECRET_VALUE},
                   runner_token=TOKEN)


def test_the_test_job_sets_every_field() -> None:
    assert defaulted(full_job()) == ["job.version"]  # the only version there is


def test_a_job_file_the_local_driver_writes_is_what_the_runner_reads(tmp_path: Path) -> None:
    driver = LocalDriver(tmp_path / "jobs", tmp_path / "sessions", sandbox="off")
    job = full_job(volume_dir=None, faults=[])  # the local driver sets these itself
    with pytest.raises(DriverError):  # no runner protocol address: nothing is started
        driver._create(spec_of(job))
    folder = tmp_path / "jobs" / job.runner_job_id
    read = read_job(folder / JOB_FILE)
    assert read == msgspec.structs.replace(
        job, resource_bin_path=f"/opt/bin/{job.runner_job_id}",
        volume_dir=str(tmp_path / "sessions" / "ses_1"))
    text = (folder / JOB_FILE).read_text()
    assert SECRET_VALUE not in text and TOKEN not in text and "/srv/secrets" not in text


def test_a_job_file_the_kubernetes_driver_writes_is_what_the_runner_reads() -> None:
    job = full_job()
    data = base64.b64decode(secret_data(spec_of(job))[JOB_SPEC_KEY])
    assert jobfile.decode(data) == job
    assert SECRET_VALUE.encode() not in data and TOKEN.encode() not in data


def test_what_the_runner_reads_encodes_back_to_the_same_file() -> None:
    written = jobfile.encode(full_job())
    assert jobfile.encode(jobfile.decode(written)) == written
    assert msgspec.to_builtins(jobfile.decode(written)) == msgspec.json.decode(written)


@pytest.mark.parametrize(("change", "words"), [
    ({"version": 2}, "job file version 2 is not one this runner knows"),
    ({"version": None}, "job file version None is not one this runner knows"),
    ({"surprise": 1}, "malformed"),
])
def test_a_file_of_another_version_or_form_is_refused(change: dict[str, Any],
                                                      words: str) -> None:
    document = {**msgspec.to_builtins(full_job()), **change}
    with pytest.raises(JobFileRefused, match=words):
        jobfile.decode(msgspec.json.encode(document))


def test_the_local_runner_refuses_an_unknown_version_clearly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = {**msgspec.to_builtins(full_job()), "version": 99}
    (tmp_path / JOB_FILE).write_bytes(msgspec.json.encode(document))
    handler = signal.getsignal(signal.SIGTERM)  # the runner takes SIGTERM: give it back
    try:
        assert local.main([str(tmp_path), "--secret-root", str(tmp_path)]) == 2
    finally:
        signal.signal(signal.SIGTERM, handler)
    assert "job file version 99 is not one this runner knows" in capsys.readouterr().err


def test_bundle_items_and_prompts_carry_the_task_manifest_as_given() -> None:
    """The plan's item types hold what the task's ``resourceBundleRef`` gave, unchanged."""
    bundle = model.Bundle(subpath="skills", target_path=".agents/skills", name="skills",
                          repoUrl="https://git.example/skills", ref="v2", commitId="e" * 40)
    short = model.Bundle(subpath="tools", target_path="tools")
    prompt = model.PromptRef(name="intro", path="prompts/intro.md")
    for given, kind in ((bundle, BundleItem), (short, BundleItem), (prompt, PromptItem)):
        builtins = msgspec.to_builtins(given)
        assert msgspec.to_builtins(msgspec.convert(builtins, kind)) == builtins

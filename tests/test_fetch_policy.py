"""Issue 26 item 3 (DESIGN 13): the runner fetches as root outside the sandbox, so a
repository URL never makes it read another job's files or reach the host's own services.

``file://`` URLs only below ``SVC_FETCH_ALLOW_FILE_ROOTS`` (never the data directory or the
workspace root); loopback, link-local and metadata hosts only when ``SVC_FETCH_ALLOW_HOSTS``
names them. Refused at intake (400 ``schema-invalid``, nothing stored), at dispatch when the
host resolves to such an address (``tenant-policy-denied``, no runner job), and again by the
runner right before ``git`` runs. No test asks an external DNS server: names that "resolve"
are answered by a stand-in for the lookup."""

from __future__ import annotations

import dataclasses
import ipaddress
from pathlib import Path
from typing import Any

import pytest

from api.settings import ServiceSettings
from ledger.errors import DomainError
from runner_assembly.assembly import fetch_policy, model
from runner_assembly.assembly.failures import AssemblyFailure
from runner_assembly.contract.jobfile import FetchAllow, decode
from runner_assembly.runner import git
from runner_assembly.settings import RunnerSettings
from tests.bundles import bundle_ref, make_bundle_repo
from tests.conftest import app_client
from tests.support import snapshot, task_body
from tests.test_dispatch import TASKS, dispatch, job_dirs, settle, submit

SESSIONS = "/api/v1/sessions"
FORBIDDEN_HOSTS = [
    "http://169.254.169.254/latest/meta-data.git",
    "http://metadata.google.internal/computeMetadata/v1.git",
    "https://metadata.google.internal./x.git",
    "http://127.0.0.1:8080/api/v1/health.git",
    "http://localhost:8080/x.git",
    "https://api.localhost/x.git",
    "http://[::1]:5432/x.git",
    "http://[::ffff:127.0.0.1]/x.git",
    "http://2130706433/x.git",
    "http://127.1/x.git",
    "http://0x7f000001/x.git",
    "http://0.0.0.0:8080/x.git",
    "http://[fd00:ec2::254]/x.git",
    "http://100.100.100.200/x.git",
    "git://127.0.0.1/x.git",
    "ssh://git@127.0.0.1:22/x.git",
    "git@localhost:acme/x.git",
    "git@169.254.169.254:acme/x.git",
]
PUBLIC = ["https://github.com/acme/tools.git", "git@github.com:acme/tools.git",
          "ssh://git@git.example.org/x.git", "http://10.1.2.3/internal.git",
          "https://192.168.1.5/x.git"]


def settings_without_allow_list(base: RunnerSettings) -> RunnerSettings:
    """The test settings as an operator leaves them by default: nothing allow-listed."""
    return dataclasses.replace(base, fetch_allow_file_roots=(), fetch_allow_hosts=())


@pytest.mark.parametrize("url", FORBIDDEN_HOSTS)
def test_a_forbidden_host_is_refused_as_written(url: str) -> None:
    refusal = fetch_policy.lexical(url, FetchAllow())
    assert refusal is not None and "SVC_FETCH_ALLOW_HOSTS" in refusal
    with pytest.raises(DomainError) as refused:
        model.check_repo_url(url, "resourceBundleRef.repoUrl")
    assert refused.value.code == "schema-invalid"


@pytest.mark.parametrize("url", PUBLIC)
def test_public_and_private_network_hosts_pass_as_written(url: str) -> None:
    assert fetch_policy.lexical(url, FetchAllow()) is None
    model.check_repo_url(url, "resourceBundleRef.repoUrl")


def test_the_operator_allows_a_host_by_name_and_port() -> None:
    allow = FetchAllow(hosts=["127.0.0.1:8081", "localhost", "[::1]:9418"])
    assert fetch_policy.lexical("http://127.0.0.1:8081/x.git", allow) is None
    assert fetch_policy.lexical("http://127.0.0.1:8080/x.git", allow) is not None
    assert fetch_policy.lexical("http://localhost:1234/x.git", allow) is None
    assert fetch_policy.lexical("git://[::1]/x.git", allow) is None
    assert fetch_policy.lexical("http://[::1]/x.git", allow) is not None


def test_file_urls_need_an_allowed_root_and_never_reach_the_data_dir(tmp_path: Path) -> None:
    data = tmp_path / "data"
    other_job = data / "jobs" / "job_other" / "workspaces" / "key"
    other_job.mkdir(parents=True)
    (tmp_path / "repos" / "r").mkdir(parents=True)
    (tmp_path / "repos" / "link").symlink_to(other_job)
    repo = (tmp_path / "repos" / "r").as_uri()
    assert fetch_policy.lexical(repo, FetchAllow()) is not None, "no allow-list: refused"
    allow = FetchAllow(file_roots=[str(tmp_path)], denied_roots=[str(data)])
    assert fetch_policy.lexical(repo, allow) is None
    for url in (other_job.as_uri(), (tmp_path / "repos" / "link").as_uri(),
                f"file://{tmp_path}/repos/r/../../data/jobs/job_other/workspaces/key",
                f"file://{tmp_path}/repos/%2e%2e/data/jobs", "file://host/etc",
                "file:///etc/shadow"):
        assert fetch_policy.lexical(url, allow) is not None, url


def test_the_settings_deny_the_data_dir_and_parse_the_lists(tmp_path: Path) -> None:
    service = ServiceSettings.from_env({"SVC_FETCH_ALLOW_FILE_ROOTS": "/srv/git:/opt/repos",
                                        "SVC_FETCH_ALLOW_HOSTS": "127.0.0.1:3000, git.lan"})
    runner = service.runner(tmp_path / "data")
    assert runner.fetch_allow.file_roots == ["/srv/git", "/opt/repos"]
    assert runner.fetch_allow.hosts == ["127.0.0.1:3000", "git.lan"]
    assert str((tmp_path / "data").resolve()) in runner.fetch_allow.denied_roots
    with pytest.raises(ValueError, match="SVC_FETCH_ALLOW_FILE_ROOTS"):
        ServiceSettings.from_env({"SVC_FETCH_ALLOW_FILE_ROOTS": "relative/dir"})
    with pytest.raises(ValueError, match="SVC_FETCH_ALLOW_HOSTS"):
        ServiceSettings.from_env({"SVC_FETCH_ALLOW_HOSTS": "http://x/"})


def fake_dns(monkeypatch: pytest.MonkeyPatch, answers: dict[str, str]) -> None:
    """Names resolve to the given addresses (no DNS server is asked)."""
    def lookup(host: str, _port: int | None, _timeout: float) -> list[Any] | None:
        return [ipaddress.ip_address(answers[host])] if host in answers else None

    monkeypatch.setattr(fetch_policy, "lookup", lookup)


def test_a_name_resolving_to_a_forbidden_address_is_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    fake_dns(monkeypatch, {"rebind.example": "169.254.169.254", "ok.example": "93.184.216.34"})
    url = "https://rebind.example/x.git"
    assert fetch_policy.lexical(url, FetchAllow()) is None, "a name passes intake"
    assert "resolves to" in str(fetch_policy.resolved(url, FetchAllow(), strict=False))
    assert fetch_policy.resolved(url, FetchAllow(hosts=["rebind.example"]), strict=True) is None
    assert fetch_policy.resolved("https://ok.example/x.git", FetchAllow(), strict=True) is None
    assert fetch_policy.resolved("https://nx.example/x.git", FetchAllow(), strict=False) is None
    assert fetch_policy.resolved("https://nx.example/x.git", FetchAllow(), strict=True)


def test_a_host_that_does_not_resolve_at_fetch_time_is_unavailable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    fake_dns(monkeypatch, {})
    with pytest.raises(AssemblyFailure) as failed:
        fetch_policy.check_fetch("https://gone.example/x.git", FetchAllow(), strict=True)
    assert failed.value.kind == "bundle-unavailable"
    fetch_policy.check_fetch("https://gone.example/x.git", FetchAllow(), strict=False)


def test_the_lookup_is_bounded_in_time() -> None:
    assert fetch_policy.lookup("localhost", 80, 2.0) is not None
    assert fetch_policy.lookup("no-such-host.invalid", 80, 0.5) is None


# --- the runner checks again, right before git runs ----------------------------------------


@pytest.mark.parametrize("url", ["http://127.0.0.1:9/x.git", "http://169.254.169.254/x.git",
                                 "file:///etc", "https://rebind.example/x.git"])
def test_the_runner_refuses_before_git_runs(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, url: str) -> None:
    fake_dns(monkeypatch, {"rebind.example": "127.0.0.1"})
    ran: list[tuple[str, ...]] = []
    monkeypatch.setattr(git, "git", lambda *args, **_: ran.append(args) or "")
    with pytest.raises(AssemblyFailure) as refused:
        git.clone(url, tmp_path / "dest", None, FetchAllow(file_roots=[str(tmp_path)]))
    assert refused.value.kind == "tenant-policy-denied"
    assert ran == [] and not (tmp_path / "dest").exists()


def test_the_runner_clones_what_the_operator_allows(tmp_path: Path) -> None:
    repo = make_bundle_repo(tmp_path / "src")
    with pytest.raises(AssemblyFailure):
        git.clone(repo.as_uri(), tmp_path / "refused", None)
    git.clone(repo.as_uri(), tmp_path / "dest", None, FetchAllow(file_roots=[str(tmp_path)]))
    assert (tmp_path / "dest" / ".git").is_dir()


# --- through the API: intake, dispatch, the job file -----------------------------------------


def _intake_bodies(url: str) -> list[tuple[str, dict[str, Any]]]:
    """Every place a repository URL enters: submit and session run bases."""
    fields = [{"workspaceRef": {"repoUrl": url}},
              {"resourceBundleRef": {"kind": "gitbundle", "repoUrl": url}},
              {"resourceBundleRef": {"kind": "gitbundle", "repoUrl": "https://github.com/a/b",
                                     "bundles": [{"subpath": "t", "target_path": "t",
                                                  "repoUrl": url}]}}]
    return [(path, body) for f in fields
            for path, body in ((TASKS, task_body(**f)), (SESSIONS, {"runBase": f}))]


async def test_another_job_s_workspace_is_never_cloned(
    database_url: str, runner_settings: RunnerSettings, tmp_path: Path
) -> None:
    """The attack: ``file:///<data>/jobs/<job>/workspaces/<key>`` (readable from the API)
    cloned another job's private checkout. Even with the tests' whole temporary root
    allow-listed, the data directory stays refused; and metadata and loopback hosts with it."""
    repo = make_bundle_repo(tmp_path / "src")
    async with app_client(database_url, runner_settings) as client:
        first = await submit(client, "do the task", resourceBundleRef=bundle_ref(repo))
        await dispatch(client, first)
        assert (await settle(client, first))["state"] == "completed"
        [job] = job_dirs(runner_settings)
        [workspace] = (job / "workspaces").iterdir()
        spec = decode((job / "spec.json").read_bytes())
        assert spec.fetch_allow == runner_settings.fetch_allow, "the runner gets the list"
        before = await snapshot(database_url)
        for url in [workspace.as_uri(), job.as_uri(), *FORBIDDEN_HOSTS[:4]]:
            for path, body in _intake_bodies(url):
                response = await client.post(path, json=body)
                assert response.status_code == 400, (url, path, response.text)
                assert response.json()["error"]["code"] == "schema-invalid"
                assert "repoUrl" in response.json()["error"]["message"]
        assert await snapshot(database_url) == before, "a refusal changed something"


async def test_without_an_allow_list_file_urls_are_refused(
    database_url: str, runner_settings: RunnerSettings, tmp_path: Path
) -> None:
    repo = make_bundle_repo(tmp_path / "src")
    settings = settings_without_allow_list(runner_settings)
    async with app_client(database_url, settings) as client:
        before = await snapshot(database_url)
        response = await client.post(TASKS, json=task_body(resourceBundleRef=bundle_ref(repo)))
        assert response.status_code == 400 and \
            response.json()["error"]["code"] == "schema-invalid", response.text
        assert "SVC_FETCH_ALLOW_FILE_ROOTS" in response.json()["error"]["message"]
        assert await snapshot(database_url) == before


async def test_a_host_resolving_to_a_forbidden_address_fails_at_dispatch(
    database_url: str, runner_settings: RunnerSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A name passes intake; at dispatch it resolves to the metadata address: the attempt
    ends ``tenant-policy-denied`` (blocked) and no runner job is created."""
    fake_dns(monkeypatch, {"repo.rebind.example": "169.254.169.254"})
    async with app_client(database_url, runner_settings) as client:
        task_id = await submit(client, resourceBundleRef={
            "kind": "gitbundle", "repoUrl": "https://repo.rebind.example/x.git"})
        task = await dispatch(client, task_id)
    attempt = task["latestAttempt"]
    assert (task["state"], attempt["failureKind"]) == ("blocked", "tenant-policy-denied"), task
    assert "repo.rebind.example" in attempt["failureMessage"]
    assert job_dirs(runner_settings) == []

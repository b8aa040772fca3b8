"""A bundle's symlinks are followed on the commit's tree, through each other, before anything
is checked out (issue 26 item 2, DESIGN 13): a chain that reaches outside the checkout, a
loop, or a link to a directory that holds it is refused, and no file of the host reaches the
overlay the backend sees."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner_assembly.runner.tree_links import refused_link, resolve
from runner_assembly.settings import RunnerSettings
from tests.bundles import bundle_ref, make_bundle_repo
from tests.conftest import app_client
from tests.test_assembly_runner import settings_for
from tests.test_dispatch import dispatch, job_dirs, settle, submit

HOST_CANARY = "host-file-canary-6d1c"


@pytest.mark.parametrize("links", [
    {"x": ".", "tools/leak": "../x/x/x/../../../etc/passwd"},   # the lexical check passed it
    {"a/x": "..", "tools/leak": "../a/x/a/x/../../etc/passwd"},
    {"x": ".", "tools/ok": "../src/app.py"},                     # a loop: a copy never ends
    {"a": "b", "b": "a"},
    {"tools/evil": "../../../etc/passwd"},
    {"tools/evil": "/etc/passwd"},
])
def test_links_are_followed_through_each_other_on_the_tree(links: dict[str, str]) -> None:
    assert refused_link(links) is not None


def test_links_that_stay_inside_are_kept() -> None:
    links = {"tools/run": "../src/app.py", "docs": "src", "tools/readme": "../docs/../README.md"}
    assert refused_link(links) is None
    assert resolve("tools/readme", links) == ("README.md",)
    assert resolve("docs/app.py", links) == ("src", "app.py")


async def test_a_chain_of_links_never_copies_a_host_file_into_the_overlay(
    database_url: str, runner_settings: RunnerSettings, tmp_path: Path
) -> None:
    host_file = tmp_path / "host" / "secret"
    host_file.parent.mkdir()
    host_file.write_text(HOST_CANARY)
    depth = len(tmp_path.parts) + 8  # enough ``..`` to reach / from the checkout
    # lexically inside (as many ``x/`` as ``../``), but every ``x`` is ``.``: the ``..``
    # climb out of the checkout to the root, then down to the host file
    chain = "../" + "x/" * depth + "../" * depth + str(host_file).lstrip("/")
    repo = make_bundle_repo(tmp_path, links={"x": ".", "tools/leak": chain})
    settings = settings_for(runner_settings)
    async with app_client(database_url, settings) as client:
        task_id = await submit(client, "go", resourceBundleRef=bundle_ref(repo))
        await dispatch(client, task_id)
        task = await settle(client, task_id)
    assert task["state"] == "blocked"
    assert task["latestAttempt"]["failureKind"] == "schema-invalid"
    assert "points outside the checkout" in task["latestAttempt"]["failureMessage"]
    (folder,) = job_dirs(settings)
    assert not (folder / "stdout.log").exists(), "no backend ran"
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert HOST_CANARY not in path.read_text(errors="replace"), path

"""checkov over the rendered runner-job objects and the deployment manifests: no failure
beyond the waivers documented in ``.checkov.yaml`` and in the manifests themselves."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
import yaml

from runner_assembly.assembly import k8s_objects
from tests.test_k8s_driver import plan_of, rendered_objects
from tests.test_k8s_manifests import OVERLAYS, rendered

ROOT = Path(__file__).resolve().parent.parent


def checkov() -> str:
    """The checkov program ``make test`` installs into its own environment."""
    found = os.environ.get("SVC_CHECKOV") or str(ROOT / ".venv-checkov/bin/checkov")
    if not Path(found).exists():
        pytest.fail("checkov is missing: `make test` installs it into .venv-checkov")
    return found


def failed_checks(directory: Path) -> list[str]:
    done = subprocess.run([checkov(), "--config-file", str(ROOT / ".checkov.yaml"), "-d",
                           str(directory), "-o", "json"], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    report = json.loads(done.stdout)
    reports = report if isinstance(report, list) else [report]
    assert reports and all(r["summary"]["passed"] > 0 for r in reports), done.stdout[:500]
    return [f"{c['check_id']} {c['resource']}" for r in reports
            for c in r["results"]["failed_checks"]]


def test_the_rendered_runner_job_passes_checkov(tmp_path: Path) -> None:
    plan = plan_of(tmp_path / "plan")
    objects = rendered_objects(plan)
    objects[1] = k8s_objects.per_job_secret(plan, str(uuid.uuid4()), {"LAB_API_KEY": "eA=="})
    scanned = tmp_path / "scan"
    scanned.mkdir()
    (scanned / "runner-job.yaml").write_text(yaml.safe_dump_all(objects))
    shutil.copy(ROOT / "manifests/k8s/base/networkpolicy.yaml", scanned)
    assert failed_checks(scanned) == []


def test_the_deployment_manifests_pass_checkov(tmp_path: Path) -> None:
    assert failed_checks(ROOT / "manifests/k8s/base") == []
    for overlay in OVERLAYS:  # as kustomize renders each
        (tmp_path / overlay).mkdir()
        (tmp_path / overlay / "rendered.yaml").write_text(yaml.safe_dump_all(rendered(overlay)))
        assert failed_checks(tmp_path / overlay) == [], overlay

"""A runner Job's ``activeDeadlineSeconds``: its queue's timeout budget plus a margin, in the
plan (dry run included) and the rendered Job, absent for a queue without a budget."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import msgspec
import pytest

from api.settings import ServiceSettings
from runner_assembly.assembly import k8s_objects
from runner_assembly.assembly.deadline import DEADLINE_MARGIN_S, budget_seconds, job_deadline_s
from runner_assembly.settings import RunnerSettings
from tests.conftest import app_client
from tests.support import TASKS, task_body
from tests.test_k8s_driver import KUBERNETES_VERSION, plan_of


@pytest.mark.parametrize(("text", "seconds"), [
    ("3600", 3600), ("90s", 90), ("30m", 1800), ("2h", 7200), ("1d", 86400),
    ("1h30m", 5400), (" 2H ", 7200), ("0", None), ("soon", None), ("", None), ("30 m", None),
    ("-5m", None), ("1.5h", None),
])
def test_a_budget_reads_as_seconds(text: str, seconds: int | None) -> None:
    assert budget_seconds(text) == seconds


def test_the_deadline_is_the_budget_plus_the_margin() -> None:
    budgets = {"main": "30m"}
    assert job_deadline_s(budgets, "main") == 1800 + DEADLINE_MARGIN_S
    assert job_deadline_s(budgets, "beta") is None and job_deadline_s(budgets, None) is None


def test_the_rendered_job_carries_the_deadline_only_with_a_budget(tmp_path: Path) -> None:
    plan = plan_of(tmp_path)
    assert "activeDeadlineSeconds" not in k8s_objects.job(plan)["spec"]  # type: ignore[operator]
    bounded = msgspec.structs.replace(plan, active_deadline_seconds=2100)
    job = k8s_objects.job(bounded)
    kubernetes_validate.validate(job, KUBERNETES_VERSION, strict=True)
    assert job["spec"]["activeDeadlineSeconds"] == 2100  # type: ignore[index]


async def test_dispatch_plans_the_deadline_of_the_tasks_queue(
    database_url: str, runner_settings: RunnerSettings
) -> None:
    settings = RunnerSettings(data_dir=runner_settings.data_dir,
                              timeout_budgets={"main": "30m"})
    async with app_client(database_url, settings) as client:
        planned = {}
        for queue in ("main/fast", "beta"):
            task_id = (await client.post(TASKS, json=task_body(queue=queue))).json()["taskId"]
            answer = await client.post(f"{TASKS}/{task_id}/dispatch?dryRun=true", json={})
            assert answer.status_code == 200, answer.text
            planned[queue] = answer.json()["plan"]["runnerJob"]["activeDeadlineSeconds"]
    assert planned == {"main/fast": 1800 + DEADLINE_MARGIN_S, "beta": None}


def test_a_budget_that_is_no_duration_is_refused_at_start() -> None:
    with pytest.raises(ValueError, match="SVC_QUEUE_TIMEOUT_BUDGETS: the budget of queue "
                                         "'main' is not a duration"):
        ServiceSettings.from_env({"SVC_QUEUE_TIMEOUT_BUDGETS": "main=soon"})

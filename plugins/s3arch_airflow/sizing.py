"""How the archive DAG's tasks hand a run's sizing on, through XCom: the plan task's (a run of
one day) to the size task, which takes it instead of listing the day's first keys again; the
size task's to the prepare tasks, which take the pages listed to size their day (its hand-offs,
tasks/produce/segments/sized.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from airflow.sdk import Context

SIZED_XCOM_KEY = "sized"


def sizing_handoff(context: Context, prefix: str) -> dict | None:
    """The pages of ``prefix`` the plan or size task of this run listed to size it: the prepare
    task's hand-off (tasks/produce/segments/sized.py), if there is one."""
    split = context["ti"].xcom_pull(task_ids="size", key=SIZED_XCOM_KEY) or {}
    return next((size.get("handoff") for size in split.get("sizes", ()) if size["prefix"] == prefix), None)

"""The archive catalog in the Airflow UI (docs/CATALOG.md): a FastAPI app the plugin mounts in
the api-server (``fastapi_apps``), with the catalog page and a JSON API.

A mounted app gets no authentication from Airflow: every route here depends on Airflow's own
``airflow.api_fastapi.core_api.security`` dependencies. Anonymous requests get 401; reading a
job's days needs read access to its archive DAG; the page's actions are made by the page itself
through Airflow's public REST API as the logged-in user, so Airflow decides who may trigger
(the page only greys out what the user may not do, from ``can_trigger``).

Importing this module is cheap (the api-server imports plugins at start): the engine, the
amazon provider and the database are imported on first request.
"""

from __future__ import annotations

import os
import threading
from datetime import date, timedelta
from pathlib import Path
from typing import Literal

from fastapi import Depends, FastAPI, HTTPException, Query
from fastapi.responses import HTMLResponse, Response

from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_dag

URL_PREFIX = "/s3arch-catalog"
ARCHIVE_DAG = "s3_archive__"
RESTORE_DAG = "s3_restore__"
SCRUB_DAG = "s3_scrub__"
JOB_DAGS = (ARCHIVE_DAG, RESTORE_DAG, SCRUB_DAG)  # a job's DAG ids: the prefix and the job's name
MAX_DAYS = 5 * 366

app = FastAPI(title="s3arch archive catalog",
              description="Day states of the s3arch archive jobs: docs/CATALOG.md in the s3arch repository.")

_lock = threading.Lock()
_jobs_cache: dict = {}
_clients: dict = {}  # the page's clients by job name and the connection of its catalog duty


def jobs_path() -> Path:
    chosen = os.environ.get("S3ARCH_JOBS_FILE")
    if chosen:
        return Path(chosen)
    from airflow.configuration import conf

    return Path(conf.get("core", "dags_folder")) / "archive_jobs.yaml"


def jobs() -> dict:
    """The jobs file, read again when it changes."""
    from s3arch.ops.jobs import load_jobs

    path = jobs_path()
    try:
        stamp = path.stat().st_mtime_ns
    except FileNotFoundError:
        return {}
    with _lock:
        if _jobs_cache.get("stamp") != (path, stamp):
            _jobs_cache.update(stamp=(path, stamp), jobs=load_jobs(path))
        return _jobs_cache["jobs"]


def job_named_by(dag_id: str):
    """The job whose archive, restore or scrub DAG ``dag_id`` is, or None."""
    for prefix in JOB_DAGS:
        if dag_id.startswith(prefix):
            job = jobs().get(dag_id[len(prefix):])
            if job is not None:
                return job
    return None


def job_of(dag_id: str):
    job = job_named_by(dag_id)
    if job is None:
        raise HTTPException(404, f"{dag_id} is not an s3arch archive job's DAG")
    return job


def store_for(job):
    """The catalog's store of ``job``, made once per job and connection: a jobs file that
    gives the job another connection gets clients of that connection."""
    key = (job.name, job.conn_id_for("catalog"), job.expected_owner, job.throttle_budget)
    with _lock:
        if key not in _clients:
            from s3arch_airflow.hooks import S3ArchHook

            _clients[key] = S3ArchHook.for_job(job, "catalog").engine_clients().store
        return _clients[key]


def may(user, dag_id: str, method: Literal["GET", "POST"], run: bool = False) -> bool:
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails

    return get_auth_manager().is_authorized_dag(method=method, access_entity=DagAccessEntity.RUN if run else None,
                                                details=DagDetails(id=dag_id), user=user)


def job_info(job, user) -> dict:
    archive, restore = ARCHIVE_DAG + job.name, RESTORE_DAG + job.name
    return {"name": job.name, "dag_id": archive, "restore_dag_id": restore, "scrub_dag_id": SCRUB_DAG + job.name,
            "description": job.description,
            "source": str(job.source), "prefix_template": job.prefix_template,
            "destination": str(job.destination), "storage_class": job.storage_class,
            "start_date": job.start_date.isoformat(), "min_age_days": job.min_age_days,
            "schedule": job.schedule, "object_lock": job.object_lock, "retain_days": job.retain_days,
            "can_trigger": may(user, archive, "POST", run=True),
            "can_restore": may(user, restore, "POST", run=True)}


@app.get("/", response_class=HTMLResponse, include_in_schema=False)
def page(user: GetUserDep) -> HTMLResponse:
    from s3arch_airflow.catalog_page import PAGE

    return HTMLResponse(PAGE, headers={"Cache-Control": "no-store"})


ICON = ('<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24" fill="none" stroke="currentColor" '
        'stroke-width="2"><rect x="3" y="4" width="18" height="17" rx="2"/><path d="M3 9h18M8 2v4M16 2v4"/>'
        '<path d="M7 13h2M11 13h2M15 13h2M7 17h2M11 17h2"/></svg>')


@app.get("/icon.svg", include_in_schema=False)
def icon(user: GetUserDep) -> Response:
    return Response(ICON, media_type="image/svg+xml", headers={"Cache-Control": "max-age=86400"})


@app.get("/api/jobs")
def list_jobs(user: GetUserDep,
              dag_id: str | None = Query(None, description="the DAG whose Catalog tab asks: `selected` names its job")) -> dict:
    """The archive jobs whose DAG the user may read; with ``dag_id`` (the page in a DAG's tab),
    ``selected``: the job whose archive, restore or scrub DAG it is, or null for any other DAG
    (the page then says so rather than show some other job)."""
    listed = [job_info(job, user) for name, job in sorted(jobs().items()) if may(user, ARCHIVE_DAG + name, "GET")]
    answer: dict = {"jobs": listed}
    if dag_id is not None:
        job = job_named_by(dag_id)
        answer["selected"] = job.name if job is not None and any(j["name"] == job.name for j in listed) else None
    return answer


@app.get("/api/dags/{dag_id}/days", dependencies=[Depends(requires_access_dag("GET"))])
def job_days(dag_id: str, user: GetUserDep,
             date_from: date | None = Query(None, description="first day (default: 1 January of the job's start, at most two years back)"),
             date_to: date | None = Query(None, description="last day (default: today)"),
             refresh: bool = Query(False, description="read S3 again instead of the cached view")) -> dict:
    """One job's days over a range, with their states, figures and Airflow's last run."""
    from s3arch.ops.catalog.job_catalog import catalog_for
    from s3arch.ops.catalog.view import apply_runs
    from s3arch.restore.glacier import NEEDS_RESTORE

    job = job_of(dag_id)
    today = date.today()
    last = date_to or today
    first = date_from or date(max(job.start_date.year, today.year - 2), 1, 1)
    if first > last:
        raise HTTPException(422, f"date_from {first} is after date_to {last}")
    if (last - first).days >= MAX_DAYS:
        raise HTTPException(422, f"at most {MAX_DAYS} days at once")
    runs, restored = airflow_runs(job, first, last)
    view = catalog_for(job, store_for(job)).view(
        first, last, refresh=refresh,
        restore_hint=restored if job.storage_class in NEEDS_RESTORE else None)
    view = apply_runs(view, runs)  # a new view: the cached one stays as S3 showed it
    from s3arch_airflow.backfills import backfill_progress

    return {**view.to_dict(), "job_info": job_info(job, user), "backfills": backfill_progress(job, dag_id, view)}


def airflow_runs(job, first: date, last: date) -> tuple[dict[str, dict], set[date]]:
    """Per day, the newest archive task instance that worked on it (from its map index name,
    the prefix or ``first .. last (N prefixes)``); and the days a restore ran for lately."""
    from sqlalchemy import and_, func, select

    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance as TI
    from airflow.utils.session import create_session

    runs: dict[str, dict] = {}
    restored: set[date] = set()
    archive, restore = ARCHIVE_DAG + job.name, RESTORE_DAG + job.name
    columns = (TI.dag_id, TI.run_id, TI.task_id, TI.map_index, TI.state, TI.rendered_map_index, TI.end_date)
    # Newest first by when it was last set going: a queued or scheduled instance has no start
    # yet, and ordered by its start alone it came last, so an older run's result hid it.
    latest = func.coalesce(TI.start_date, TI.queued_dttm, DagRun.queued_at, DagRun.run_after)
    query = (select(*columns)  # type: ignore[call-overload]
             .join(DagRun, and_(DagRun.dag_id == TI.dag_id, DagRun.run_id == TI.run_id))
             .where(TI.dag_id.in_([archive, restore]), TI.task_id.in_(["archive", "assemble", "restore"])))
    with create_session() as session:
        rows = session.execute(query.order_by(latest.desc()).limit(20_000)).all()
    for dag_id, run_id, task_id, map_index, state, label, ended in rows:
        for day in _days_of(job, label, first, last):
            if dag_id == restore:
                if state == "success" and ended is not None and ended.date() >= date.today() - timedelta(days=30):
                    restored.add(day)
                continue
            runs.setdefault(day.isoformat(), {
                "state": str(state.value if hasattr(state, "value") else state) if state else "queued",
                "run_id": run_id, "task_id": task_id, "map_index": map_index,
                "url": f"/dags/{dag_id}/runs/{run_id}/tasks/{task_id}/mapped/{map_index}"})
    return runs, restored


def _days_of(job, label: str | None, first: date, last: date) -> list[date]:
    if not label:
        return []
    from s3arch.core.errors import BadArgument
    from s3arch.ops.planning import days_between

    try:
        if " .. " in label:
            a, b = label.split(" .. ", 1)
            start, end = job.date_of(a), job.date_of(b.split(" (", 1)[0])
            return [d for d in days_between(max(start, first), min(end, last))]
        day = job.date_of(label.split(" [", 1)[0])  # a segment task is "<prefix> [k/N]"
        return [day] if first <= day <= last else []
    except BadArgument:
        return []

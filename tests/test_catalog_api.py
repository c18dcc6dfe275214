"""The catalog app's routes under Airflow's own authentication: Airflow's test client over
``create_app()``, SimpleAuthManager with an admin, a user and a viewer (not all-admins, where
no 401 or 403 could ever show)."""

from __future__ import annotations

import json
import re
from datetime import date, datetime, timezone
from types import SimpleNamespace

import pytest

from devtools.sample_data import seed_day
from helpers import LOG_TEMPLATE, airflow_with_log_job, use_airflow_home
from s3arch_airflow.catalog_page import PAGE


pytestmark = pytest.mark.slow  # an in-process Airflow with the catalog's API and its DAGs


JOB = "cat"
DAG = f"s3_archive__{JOB}"
RESTORE_DAG = f"s3_restore__{JOB}"
PREFIX = "/s3arch-catalog"


@pytest.fixture(scope="module")
def api(minio, tmp_path_factory):
    airflow, s3, src, dst = airflow_with_log_job(minio, tmp_path_factory.mktemp("airflow-catalog"), JOB,
                                                 start_date="2026-03-01")
    env = {**airflow.env, "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
           "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin,user:user,viewer:viewer"}
    airflow.env.update(env)
    seed_day(s3, src, LOG_TEMPLATE, date(2026, 3, 2), files_per_hour=1, lines_per_file=5)
    with pytest.MonkeyPatch.context() as mp:
        use_airflow_home(mp, env)
        from fastapi.testclient import TestClient

        from airflow.api_fastapi.app import create_app
        from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

        app = create_app()
        # The plugin (the package's airflow.plugins entry point) mounts the catalog app.
        assert any(getattr(r, "path", None) == PREFIX for r in app.routes), [getattr(r, "path", r) for r in app.routes]
        client = TestClient(app)
        tokens = {role: app.state.auth_manager.generate_jwt(SimpleAuthManagerUser(username=role, role=role))
                  for role in ("admin", "user", "viewer")}
        yield SimpleNamespace(client=client, tokens=tokens, airflow=airflow, s3=s3, src=src, dst=dst)


def _get(client, token, path, **kw):
    client.cookies.clear()
    if token:
        client.cookies.set("_token", token)
    return client.get(path, **kw)


ROUTES = [f"{PREFIX}/", f"{PREFIX}/api/jobs", f"{PREFIX}/api/dags/{DAG}/days?date_from=2026-03-01&date_to=2026-03-05"]


@pytest.mark.parametrize("path", ROUTES)
def test_anonymous_gets_401(api, path):
    client = api.client
    assert _get(client, None, path).status_code == 401


def test_a_bad_token_gets_403(api):
    client = api.client
    assert _get(client, "not-a-jwt", f"{PREFIX}/api/jobs").status_code == 403


@pytest.mark.parametrize("role", ["admin", "user", "viewer"])
def test_each_role_reads_and_only_triggerers_may_act(api, role):
    client, tokens = api.client, api.tokens
    page = _get(client, tokens[role], f"{PREFIX}/")
    assert page.status_code == 200 and "Archive catalog" in page.text
    jobs = _get(client, tokens[role], f"{PREFIX}/api/jobs").json()["jobs"]
    assert [j["name"] for j in jobs] == [JOB]
    assert jobs[0]["can_trigger"] is (role != "viewer") and jobs[0]["can_restore"] is (role != "viewer")
    days = _get(client, tokens[role], ROUTES[2])
    assert days.status_code == 200, days.text
    body = days.json()
    states = {d["day"]: d["state"] for d in body["days"]}
    assert states["2026-03-02"] == "missing" and states["2026-03-01"] == "empty"
    assert body["job_info"]["can_trigger"] is (role != "viewer") and body["as_of"]
    # The page's actions go through Airflow's REST API as the same user: a viewer gets 403.
    client.cookies.clear()
    client.cookies.set("_token", tokens[role])
    run = client.post(f"/api/v2/dags/{DAG}/dagRuns",
                      json={"logical_date": None, "conf": {"prefixes": ["logs/2026/03/02/"], "dry_run": True}})
    # (The DAGs are not parsed into this DB: a user's request passes authorization and finds no DAG.)
    assert run.status_code == (403 if role == "viewer" else 404), run.text


def test_the_plugin_shows_the_catalog_in_nav_and_as_a_dag_tab(api):
    client, tokens = api.client, api.tokens
    plugins = _get(client, tokens["viewer"], "/api/v2/plugins").json()["plugins"]
    ours = next(p for p in plugins if p["name"] == "s3arch")
    views = {v["destination"]: v for v in ours["external_views"]}
    assert views["nav"]["href"] == f"{PREFIX}/" and views["dag"]["href"] == f"{PREFIX}/?dag_id={{DAG_ID}}"
    assert [a["url_prefix"] for a in ours["fastapi_apps"]] == [PREFIX]
    assert _get(client, tokens["viewer"], f"{PREFIX}/icon.svg").headers["content-type"].startswith("image/svg")


@pytest.mark.parametrize("dag_id, job", [(DAG, JOB), (RESTORE_DAG, JOB), (f"s3_scrub__{JOB}", JOB),
                                          ("some_other_dag", None), ("s3_archive__no_such_job", None)])
def test_a_dags_catalog_tab_opens_its_job_or_says_it_is_not_an_archive_jobs(api, dag_id, job):
    """The tab (``?dag_id={DAG_ID}``) asks which job the DAG is: the job for its archive, restore
    or scrub DAG; none for any other DAG, where the page says so instead of showing the first job."""
    client, tokens = api.client, api.tokens
    body = _get(client, tokens["viewer"], f"{PREFIX}/api/jobs?dag_id={dag_id}").json()
    assert body["selected"] == job and [j["name"] for j in body["jobs"]] == [JOB]
    assert body["jobs"][0]["scrub_dag_id"] == f"s3_scrub__{JOB}"
    days = _get(client, tokens["viewer"], f"{PREFIX}/api/dags/{dag_id}/days?date_from=2026-03-01&date_to=2026-03-03")
    if job:
        assert days.status_code == 200 and days.json()["job"] == job
    else:
        assert days.status_code == 404 and "is not an s3arch archive job's DAG" in days.json()["detail"]
    page = _get(client, tokens["viewer"], f"{PREFIX}/?dag_id={dag_id}").text
    assert "is not an archive job's DAG" in page and "listing.selected" in page  # the page follows `selected`


def test_unknown_dag_is_404_and_bad_range_422(api):
    client, tokens = api.client, api.tokens
    assert _get(client, tokens["viewer"], f"{PREFIX}/api/dags/some_other_dag/days").status_code == 404
    bad = _get(client, tokens["viewer"], f"{PREFIX}/api/dags/{DAG}/days?date_from=2026-03-05&date_to=2026-03-01")
    assert bad.status_code == 422


def test_scrub_dag_passes_then_fails_on_drift(api, minio):
    """The scrub DAG of the job, run with dag.test(): green on intact archives, red with the
    drift table once an archive is deleted; the catalog then shows the drift."""
    from helpers import dag_bag

    from helpers import ROOT, engine_clients
    from s3arch.archive import archive_prefix
    from s3arch.ops.jobs import load_jobs

    job = load_jobs(api.airflow.env["S3ARCH_JOBS_FILE"])[JOB]
    clients = engine_clients(minio)
    for day in (date(2026, 3, 3), date(2026, 3, 4)):
        seed_day(api.s3, api.src, LOG_TEMPLATE, day, files_per_hour=1, lines_per_file=5)
        assert archive_prefix(job.spec_for(job.prefix_for(day)), clients).status.value == "archived"
    bag = dag_bag(str(ROOT / "dags" / "s3_scrub.py"))
    assert not bag.import_errors, bag.import_errors
    dag = bag.dags[f"s3_scrub__{JOB}"]
    assert dag.schedule == "@monthly"
    conf = {"date_from": "2026-03-01", "date_to": "2026-03-05", "sample": 2}
    assert dag.test(run_conf=conf).state == "success"
    api.s3.delete_object(Bucket=api.dst, Key=f"archive/{api.src}/logs/2026/03/03.tar.gz")
    assert dag.test(run_conf=conf).state == "failed"
    client, tokens = api.client, api.tokens
    body = _get(client, tokens["viewer"],
                f"{PREFIX}/api/dags/{DAG}/days?date_from=2026-03-01&date_to=2026-03-05&refresh=true").json()
    by_day = {d["day"]: d for d in body["days"]}
    assert by_day["2026-03-03"]["scrub"]["drift"][0]["kind"] == "archive missing"
    assert by_day["2026-03-04"]["scrub"]["verified"] and body["totals"]["drift"] == ["2026-03-03"]


# -- Airflow's side of a day, from real DagRuns and task instances in this module's Airflow DB.
# These run after the tests above: dag.test() puts the archive DAG into the DB, after which the
# REST API's POST above would create a run instead of answering 404.

def _dag(dag_id: str):
    from helpers import dag_bag

    from helpers import ROOT

    bag = dag_bag(str(ROOT / "dags"))
    assert not bag.import_errors, bag.import_errors
    return bag.dags[dag_id]


def _days(api, first: str, last: str, role: str = "viewer") -> dict[str, dict]:
    answer = _get(api.client, api.tokens[role],
                  f"{PREFIX}/api/dags/{DAG}/days?date_from={first}&date_to={last}&refresh=true")
    assert answer.status_code == 200, answer.text
    return {d["day"]: d for d in answer.json()["days"]}


def _post_run(api, dag_id: str, conf: dict, role: str = "user") -> dict:
    api.client.cookies.clear()
    api.client.cookies.set("_token", api.tokens[role])
    created = api.client.post(f"/api/v2/dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": conf})
    assert created.status_code == 200, created.text
    return created.json()


def test_days_show_the_last_task_failed_queued_and_running_with_a_link_to_it(api):
    """A real archive run (dag.test) whose middle day has no objects: that day is "failed" with
    a link to its task instance; a newer run's task for it, queued (no start time yet) and then
    running, makes it "running", however much older the failed one's start."""
    from airflow.models.taskinstance import TaskInstance as TI
    from airflow.utils.session import create_session

    for day in (date(2026, 3, 10), date(2026, 3, 12)):  # 03-11 holds nothing: its task fails
        seed_day(api.s3, api.src, LOG_TEMPLATE, day, files_per_hour=1, lines_per_file=5)
    run = _dag(DAG).test(run_conf={"date_from": "2026-03-10", "date_to": "2026-03-12"})
    assert run.state == "failed"
    days = _days(api, "2026-03-10", "2026-03-12")
    assert [days[d]["state"] for d in ("2026-03-10", "2026-03-11", "2026-03-12")] == ["archived", "failed", "archived"]
    failed = days["2026-03-11"]["airflow"]
    assert failed["state"] == "failed" and failed["run_id"] == run.run_id
    assert failed["url"] == f"/dags/{DAG}/runs/{run.run_id}/tasks/archive/mapped/{failed['map_index']}"
    assert days["2026-03-10"]["airflow"]["state"] == "success"
    # The link names a real task instance, the one that worked on that day.
    api.client.cookies.set("_token", api.tokens["viewer"])
    ti = api.client.get(f"/api/v2/dags/{DAG}/dagRuns/{run.run_id}/taskInstances/archive/{failed['map_index']}")
    assert ti.status_code == 200 and ti.json()["rendered_map_index"] == "logs/2026/03/11/" and ti.json()["state"] == "failed"

    # A re-run of the day through the REST API; the scheduler (absent here) would expand its
    # archive task and queue it: that is done to the run's own task instance.
    rerun = _post_run(api, DAG, {"prefixes": ["logs/2026/03/11/"]})
    with create_session() as session:
        queued = session.query(TI).filter_by(dag_id=DAG, run_id=rerun["dag_run_id"], task_id="archive").one()
        queued.map_index, queued._rendered_map_index = 0, "logs/2026/03/11/"
        queued.state, queued.queued_dttm, queued.start_date = "queued", datetime.now(timezone.utc), None
    again = _days(api, "2026-03-11", "2026-03-11")["2026-03-11"]
    assert again["state"] == "running" and again["airflow"]["state"] == "queued"
    assert again["airflow"]["run_id"] == rerun["dag_run_id"]
    with create_session() as session:
        session.query(TI).filter_by(dag_id=DAG, run_id=rerun["dag_run_id"], task_id="archive").update(
            {"state": "running", "start_date": datetime.now(timezone.utc)})
    again = _days(api, "2026-03-11", "2026-03-11")["2026-03-11"]
    assert again["state"] == "running" and again["airflow"]["state"] == "running"


def test_a_restore_run_marks_its_days_as_restored_lately(api):
    """A real restore run (dag.test) of a day makes that day one the catalog asks S3 about for
    a restored copy's expiry (GLACIER jobs; tests/test_catalog.py shows the expiry on moto)."""
    from s3arch.ops.jobs import load_jobs
    from s3arch_airflow.catalog_app import airflow_runs

    job = load_jobs(api.airflow.env["S3ARCH_JOBS_FILE"])[JOB]
    day = date(2026, 3, 10)  # archived by the test above
    assert _dag(RESTORE_DAG).test(run_conf={"prefixes": [job.prefix_for(day)]}).state == "success"
    runs, restored = airflow_runs(job, date(2026, 3, 9), date(2026, 3, 12))
    assert restored == {day}
    assert runs["2026-03-10"]["task_id"] == "archive"  # the restore run is not the day's last archive task


def test_archiving_a_selected_gap_of_days_makes_one_run_with_all_its_prefixes(api):
    """As the page does: the days of a selection not archived yet, one POST of the archive DAG
    as the user with their prefixes: one DagRun for the gap, whatever its length."""
    gap = [date(2026, 3, 14), date(2026, 3, 15), date(2026, 3, 16)]
    for day in gap:
        seed_day(api.s3, api.src, LOG_TEMPLATE, day, files_per_hour=1, lines_per_file=5)
    days = _days(api, "2026-03-12", "2026-03-16", role="user")
    assert [days[d.isoformat()]["state"] for d in gap] == ["missing"] * 3
    # The page's trigger() over a selection of 03-12 .. 03-16: its days not archived already
    # (03-12 is), nor empty (03-13), nor too recent, nor before the start (NOT_ARCHIVABLE).
    not_archivable = re.search(r"const NOT_ARCHIVABLE = (\[.*?\]);", PAGE).group(1)
    selection = [days[d] for d in sorted(days)]
    prefixes = [d["prefix"] for d in selection if d["state"] not in json.loads(not_archivable)]
    assert prefixes == [f"logs/{d:%Y/%m/%d}/" for d in gap]
    api.client.cookies.set("_token", api.tokens["viewer"])
    before = api.client.get(f"/api/v2/dags/{DAG}/dagRuns").json()["total_entries"]
    created = _post_run(api, DAG, {"prefixes": prefixes, "dry_run": False})
    api.client.cookies.set("_token", api.tokens["viewer"])
    listed = api.client.get(f"/api/v2/dags/{DAG}/dagRuns", params={"order_by": "-run_after"}).json()
    assert listed["total_entries"] == before + 1
    assert listed["dag_runs"][0]["dag_run_id"] == created["dag_run_id"]
    assert listed["dag_runs"][0]["conf"]["prefixes"] == prefixes


def test_a_backfills_progress_counts_the_days_s3_holds_archived_and_says_it_is_paused(api):
    """A Backfill over three logical dates whose first day is archived already: the job's days
    say 1 of 3 days archived, three runs waiting, and, once paused through the REST API, paused."""
    from airflow.models.backfill import _create_backfill

    days = [date(2026, 3, 20), date(2026, 3, 21), date(2026, 3, 22)]
    for day in days:
        seed_day(api.s3, api.src, LOG_TEMPLATE, day, files_per_hour=1, lines_per_file=5)
    assert _dag(DAG).test(run_conf={"prefixes": ["logs/2026/03/20/"]}).state == "success"
    backfill = _create_backfill(  # min_age_days 2: logical dates 03-22..03-24 archive 03-20..03-22
        dag_id=DAG, from_date=datetime(2026, 3, 22, tzinfo=timezone.utc), to_date=datetime(2026, 3, 24, tzinfo=timezone.utc),
        max_active_runs=2, reverse=False, dag_run_conf={}, triggering_user_name="admin")
    api.client.cookies.set("_token", api.tokens["user"])
    assert api.client.put(f"/api/v2/backfills/{backfill.id}/pause").status_code == 200

    answer = _get(api.client, api.tokens["viewer"], f"{PREFIX}/api/dags/{DAG}/days?date_from=2026-03-01&date_to=2026-03-31")
    assert answer.status_code == 200, answer.text
    progress = next(b for b in answer.json()["backfills"] if b["id"] == backfill.id)
    assert (progress["days"], progress["archived"], progress["outside_view"]) == (3, 1, 0)
    assert progress["paused"] is True and progress["completed_at"] is None
    assert progress["runs"] == {"queued": 3}
    assert "renderBackfills" in PAGE and "days archived" in PAGE

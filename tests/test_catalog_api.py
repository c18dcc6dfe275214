"""The catalog app's routes under Airflow's own authentication: Airflow's test client over
``create_app()``, SimpleAuthManager with an admin, a user and a viewer (not all-admins, where
no 401 or 403 could ever show)."""

from __future__ import annotations

from datetime import date
from types import SimpleNamespace

import pytest

from devtools.sample_data import seed_day
from helpers import LOG_TEMPLATE, airflow_with_log_job

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
        for name, value in env.items():
            mp.setenv(name, value)
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
    from airflow.dag_processing.dagbag import DagBag

    from helpers import ROOT, engine_clients
    from s3arch.archive import archive_prefix
    from s3arch.jobs import load_jobs

    job = load_jobs(api.airflow.env["S3ARCH_JOBS_FILE"])[JOB]
    clients = engine_clients(minio)
    for day in (date(2026, 3, 3), date(2026, 3, 4)):
        seed_day(api.s3, api.src, LOG_TEMPLATE, day, files_per_hour=1, lines_per_file=5)
        assert archive_prefix(job.spec_for(job.prefix_for(day)), clients).status.value == "archived"
    bag = DagBag(dag_folder=str(ROOT / "dags" / "s3_scrub.py"))
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

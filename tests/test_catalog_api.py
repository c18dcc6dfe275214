"""The catalog app's routes under Airflow's own authentication: Airflow's test client over
``create_app()``, SimpleAuthManager with an admin, a user and a viewer (not all-admins, where
no 401 or 403 could ever show)."""

from __future__ import annotations

from datetime import date

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
    airflow.cli("dags", "reserialize")  # the DAGs in the DB, so the REST API can trigger them
    seed_day(s3, src, LOG_TEMPLATE, date(2026, 3, 2), files_per_hour=1, lines_per_file=5)
    with pytest.MonkeyPatch.context() as mp:
        for name, value in env.items():
            mp.setenv(name, value)
        from fastapi.testclient import TestClient

        from airflow.api_fastapi.app import create_app
        from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

        app = create_app()
        if not any(getattr(r, "path", None) == PREFIX for r in app.routes):  # until the plugin mounts it
            from starlette.routing import Mount

            from s3arch_airflow.catalog_app import app as catalog

            app.router.routes.insert(0, Mount(PREFIX, app=catalog))  # ahead of the UI's catch-all
        client = TestClient(app)
        tokens = {role: app.state.auth_manager.generate_jwt(SimpleAuthManagerUser(username=role, role=role))
                  for role in ("admin", "user", "viewer")}
        yield client, tokens


def _get(client, token, path, **kw):
    client.cookies.clear()
    if token:
        client.cookies.set("_token", token)
    return client.get(path, **kw)


ROUTES = [f"{PREFIX}/", f"{PREFIX}/api/jobs", f"{PREFIX}/api/dags/{DAG}/days?date_from=2026-03-01&date_to=2026-03-05"]


@pytest.mark.parametrize("path", ROUTES)
def test_anonymous_gets_401(api, path):
    client, _ = api
    assert _get(client, None, path).status_code == 401


def test_a_bad_token_gets_403(api):
    client, _ = api
    assert _get(client, "not-a-jwt", f"{PREFIX}/api/jobs").status_code == 403


@pytest.mark.parametrize("role", ["admin", "user", "viewer"])
def test_each_role_reads_and_only_triggerers_may_act(api, role):
    client, tokens = api
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
    assert run.status_code == (403 if role == "viewer" else 200), run.text


def test_unknown_dag_is_404_and_bad_range_422(api):
    client, tokens = api
    assert _get(client, tokens["viewer"], f"{PREFIX}/api/dags/some_other_dag/days").status_code == 404
    bad = _get(client, tokens["viewer"], f"{PREFIX}/api/dags/{DAG}/days?date_from=2026-03-05&date_to=2026-03-01")
    assert bad.status_code == 422

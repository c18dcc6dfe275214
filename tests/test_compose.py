"""docker-compose.yml cannot run here (no Docker engine), so check what it promises."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def _compose():
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_compose_brings_up_the_celery_setup_with_minio_and_an_init_service():
    services = _compose()["services"]
    assert {"postgres", "redis", "minio", "airflow-init", "airflow-apiserver", "airflow-scheduler",
            "airflow-dag-processor", "airflow-triggerer", "airflow-worker"} <= services.keys()
    commands = {name: s.get("command") for name, s in services.items()}
    assert commands["airflow-apiserver"] == "api-server"
    assert commands["airflow-worker"] == "celery worker"
    assert "--console-address" in services["minio"]["command"]
    for name in ("airflow-apiserver", "airflow-scheduler", "airflow-worker"):
        assert services[name]["depends_on"]["airflow-init"]["condition"] == "service_completed_successfully"


def test_compose_airflow_services_share_the_project_image_and_environment():
    compose = _compose()
    airflow = {n: s for n, s in compose["services"].items() if n.startswith("airflow-")}
    for name, service in airflow.items():
        assert service["build"]["dockerfile"] == "docker/Dockerfile", name
        env = service["environment"]
        assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor", name
        assert env["S3ARCH_POOL"] == "s3_archive", name
    assert {"postgres-db", "minio-data"} <= compose["volumes"].keys()


def test_dockerfile_extends_the_pinned_airflow_and_installs_the_locked_requirements():
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    pinned = next(l for l in (ROOT / "requirements.txt").read_text().splitlines()
                  if l.startswith("apache-airflow=="))
    assert f"ARG AIRFLOW_VERSION={pinned.split('==')[1]}" in dockerfile
    assert "FROM apache/airflow:${AIRFLOW_VERSION}" in dockerfile
    assert "-r /opt/s3arch/requirements.txt -c /opt/s3arch/constraints.txt" in dockerfile
    for path in ("tasks", "dags", "plugins"):
        assert f"COPY --chown=airflow:root {path} " in dockerfile


def test_init_script_creates_connection_pool_and_buckets_the_compose_file_names():
    init = (ROOT / "docker" / "init.sh").read_text()
    env = _compose()["services"]["airflow-init"]["environment"]
    assert "airflow db migrate" in init
    assert "airflow connections add s3_archive" in init
    assert 'endpoint_url' in init and 'http://minio:9000' in init
    assert 'airflow pools set "${S3ARCH_POOL' in init and env["S3ARCH_POOL"] == "s3_archive"
    assert "S3ARCH_BUCKETS" in init and env["S3ARCH_BUCKETS"]


def test_shipped_jobs_file_uses_the_connection_pool_and_buckets_compose_creates():
    from tasks.jobs import load_jobs

    compose = _compose()
    env = compose["services"]["airflow-init"]["environment"]
    buckets = set(env["S3ARCH_BUCKETS"].split())
    for job in load_jobs(ROOT / "dags" / "archive_jobs.yaml").values():
        assert job.aws_conn_id == "s3_archive" and job.pool == env["S3ARCH_POOL"]
        assert {job.source.bucket, job.destination.bucket} <= buckets
        assert job.storage_class == "STANDARD"  # the only class MinIO accepts
    assert "./dags:/opt/airflow/dags:ro" in compose["services"]["airflow-scheduler"]["volumes"]


def test_compose_runs_the_executor_settings_of_the_native_celery_stack():
    """`make airflow-celery` and the Celery tests run what docker-compose.yml deploys."""
    from devtools.airflow_celery import CELERY_SETTINGS

    airflow = {n: s for n, s in _compose()["services"].items() if n.startswith("airflow-")}
    for name, service in airflow.items():
        env = {k: str(v) for k, v in service["environment"].items()}
        assert {k: env.get(k) for k in CELERY_SETTINGS} == CELERY_SETTINGS, name

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


def _dockerfile() -> list[tuple[str, str]]:
    """The Dockerfile's instructions as (INSTRUCTION, arguments): comments and blank lines
    dropped, continuation lines joined, as docker reads it."""
    text = (ROOT / "docker" / "Dockerfile").read_text().replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


def test_dockerfile_extends_the_pinned_airflow_and_installs_the_locked_requirements():
    instructions = _dockerfile()
    pinned = next(l for l in (ROOT / "requirements.txt").read_text().splitlines() if l.startswith("apache-airflow=="))
    args = dict(a.split("=", 1) for i, a in instructions if i == "ARG")
    assert args["AIRFLOW_VERSION"] == pinned.split("==")[1]
    assert [a for i, a in instructions if i == "FROM"] == ["apache/airflow:${AIRFLOW_VERSION}-python3.11"]
    runs = [a for i, a in instructions if i == "RUN"]
    assert any("pip install" in r and "-r /opt/s3arch/requirements.txt -c /opt/s3arch/constraints.txt" in r
               for r in runs)
    copied = {a.split()[-2]: a.split()[-1] for i, a in instructions if i == "COPY"}
    assert copied["tasks"] == "/opt/s3arch/tasks" and copied["dags"] == "/opt/airflow/dags"
    assert copied["plugins"] == "/opt/airflow/plugins"
    assert ("ENV", "PYTHONPATH=/opt/s3arch") in instructions


def test_init_script_creates_connection_pool_and_buckets_the_compose_file_names(tmp_path):
    """docker/init.sh run for real, with `airflow` and boto3 replaced by recorders: what it
    would do to Airflow and MinIO, not what its text contains."""
    import json
    import subprocess
    import sys

    env = _compose()["services"]["airflow-init"]["environment"]
    calls = tmp_path / "calls.jsonl"
    (tmp_path / "airflow").write_text(f"#!{sys.executable}\nimport json, sys\n"
                                      f"open({str(calls)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n")
    (tmp_path / "airflow").chmod(0o755)
    (tmp_path / "python").symlink_to(sys.executable)
    (tmp_path / "boto3.py").write_text(
        "import json\nclass _Client:\n    class exceptions:\n        BucketAlreadyOwnedByYou = KeyError\n"
        "    def __init__(self, **kw): self.kw = kw\n"
        f"    def create_bucket(self, Bucket):\n        open({str(calls)!r}, 'a').write("
        "json.dumps(['s3', self.kw['endpoint_url'], 'create_bucket', Bucket]) + '\\n')\n"
        "def client(service, **kw): return _Client(**kw)\n")
    run_env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "PYTHONPATH": str(tmp_path), "HOME": str(tmp_path),
               "MINIO_ROOT_USER": "user", "MINIO_ROOT_PASSWORD": "secret",
               **{k: str(v) for k, v in env.items() if k.startswith("S3ARCH_")}}
    subprocess.run(["bash", str(ROOT / "docker" / "init.sh")], env=run_env, check=True, cwd=tmp_path)
    recorded = [json.loads(line) for line in calls.read_text().splitlines()]
    assert recorded[0] == ["db", "migrate"]
    added = next(c for c in recorded if c[:3] == ["connections", "add", "s3_archive"])
    extra = json.loads(added[added.index("--conn-extra") + 1])
    assert extra["endpoint_url"] == "http://minio:9000" and added[added.index("--conn-type") + 1] == "aws"
    assert added[added.index("--conn-login") + 1] == "user"
    pool = next(c for c in recorded if c[:2] == ["pools", "set"])
    assert pool[2] == env["S3ARCH_POOL"] == "s3_archive" and int(pool[3]) > 0
    created = [c[3] for c in recorded if c[0] == "s3"]
    assert created == env["S3ARCH_BUCKETS"].split() and all(c[1] == "http://minio:9000" for c in recorded
                                                             if c[0] == "s3")


def test_shipped_jobs_file_uses_the_connection_pool_and_buckets_compose_creates():
    from s3arch.jobs import load_jobs

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

"""docker-compose.yml cannot run here (no Docker engine), so check what it promises."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def _compose():
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def _default(value) -> str:
    """A compose value as `docker compose up` without an .env file reads it: ${VAR:-default}
    becomes its default."""
    import re

    return re.sub(r"\$\{[A-Z0-9_]+:-([^}]*)\}", r"\1", str(value))


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


def test_dockerfile_extends_the_pinned_airflow_and_installs_the_package_with_the_locked_requirements():
    import tomllib

    instructions = _dockerfile()
    pinned = next(l for l in (ROOT / "requirements.txt").read_text().splitlines() if l.startswith("apache-airflow=="))
    args = dict(a.split("=", 1) for i, a in instructions if i == "ARG")
    assert args["AIRFLOW_VERSION"] == pinned.split("==")[1]
    assert [a for i, a in instructions if i == "FROM"] == ["apache/airflow:${AIRFLOW_VERSION}-python3.11"]
    # COPY SRC... DEST: what lands where in the image.
    copied: dict[str, str] = {}
    for i, a in instructions:
        if i == "COPY":
            *sources, dest = [w for w in a.split() if not w.startswith("--")]
            copied.update({src: dest.rstrip("/") for src in sources})
    # The package's sources land in /opt/s3arch as pyproject.toml maps them, so pip builds the
    # same wheel there as from a clone (tests/test_package.py builds and installs that one).
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    for source in {"pyproject.toml", "README.md", "constraints.txt", "requirements.txt"}:
        assert copied[source] == "/opt/s3arch", source
    for package, source in pyproject["tool"]["setuptools"]["package-dir"].items():
        assert copied[source] == f"/opt/s3arch/{source}", (package, source)
    runs = [a for i, a in instructions if i == "RUN"]
    install = next(r for r in runs if "pip install" in r)
    assert '"/opt/s3arch[airflow]"' in install and "-c /opt/s3arch/constraints.txt" in install
    assert "-r /opt/s3arch/requirements.txt" in install  # the deployment's Celery/PostgreSQL/Redis pins
    # Installed, not put on a path: no PYTHONPATH, nothing copied into Airflow's plugins folder
    # (the plugin comes from the package's entry point).
    assert not [a for i, a in instructions if i == "ENV" and "PYTHONPATH" in a]
    assert "/opt/airflow/plugins" not in copied.values() and copied["dags"] == "/opt/airflow/dags"


def test_init_script_creates_connection_pool_buckets_ui_passwords_and_sample_days(tmp_path):
    """docker/init.sh run for real, with `airflow` and boto3 replaced by recorders: what it
    would do to Airflow and MinIO, not what its text contains."""
    import json
    import subprocess
    import sys
    from datetime import datetime, timedelta, timezone

    from s3arch.ops.jobs import load_jobs

    env = _compose()["services"]["airflow-init"]["environment"]
    calls = tmp_path / "calls.jsonl"
    (tmp_path / "airflow").write_text(f"#!{sys.executable}\nimport json, sys\n"
                                      f"open({str(calls)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n")
    (tmp_path / "airflow").chmod(0o755)
    # `python` is the repo's venv, where the package is installed as in the image.
    (tmp_path / "python").write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    (tmp_path / "python").chmod(0o755)
    (tmp_path / "boto3.py").write_text(
        "import json, threading\n_lock = threading.Lock()\n"
        "class _Client:\n    class exceptions:\n        BucketAlreadyOwnedByYou = KeyError\n"
        "    def __init__(self, **kw): self.kw = kw\n"
        "    def _record(self, *call):\n        with _lock:\n"
        f"            open({str(calls)!r}, 'a').write(json.dumps(['s3', self.kw['endpoint_url'], *call]) + '\\n')\n"
        "    def create_bucket(self, Bucket): self._record('create_bucket', Bucket)\n"
        "    def list_objects_v2(self, Bucket, Prefix, MaxKeys):\n"
        "        return {'KeyCount': int(Prefix.endswith('/01/'))}  # the 1st of a month is there already\n"
        "    def put_object(self, Bucket, Key, Body): self._record('put_object', Bucket, Key, len(Body))\n"
        "def client(service, **kw): return _Client(**kw)\n")
    passwords = tmp_path / "auth" / "passwords.json"
    passwords.parent.mkdir()
    run_env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "PYTHONPATH": str(tmp_path), "HOME": str(tmp_path),
               "MINIO_ROOT_USER": "user", "MINIO_ROOT_PASSWORD": "secret",
               **{k: _default(v) for k, v in env.items() if k.startswith(("S3ARCH_", "AIRFLOW__CORE__SIMPLE_AUTH"))},
               "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
               "S3ARCH_JOBS_FILE": str(ROOT / "dags" / "archive_jobs.yaml"),
               "S3ARCH_SAMPLE_DATA_DIR": str(ROOT / "devtools")}
    today = datetime.now(timezone.utc).date()
    subprocess.run(["bash", str(ROOT / "docker" / "init.sh")], env=run_env, check=True, cwd=tmp_path)
    recorded = [json.loads(line) for line in calls.read_text().splitlines()]
    assert recorded[0] == ["db", "migrate"]
    added = next(c for c in recorded if c[:3] == ["connections", "add", "s3_archive"])
    extra = json.loads(added[added.index("--conn-extra") + 1])
    assert extra["endpoint_url"] == "http://minio:9000" and added[added.index("--conn-type") + 1] == "aws"
    assert added[added.index("--conn-login") + 1] == "user"
    pool = next(c for c in recorded if c[:2] == ["pools", "set"])
    assert pool[2] == env["S3ARCH_POOL"] == "s3_archive" and int(pool[3]) > 0
    s3_calls = [c for c in recorded if c[0] == "s3"]
    assert all(c[1] == "http://minio:9000" for c in s3_calls)
    assert [c[3] for c in s3_calls if c[2] == "create_bucket"] == env["S3ARCH_BUCKETS"].split()

    # The UI login DEPLOY.md documents: every configured user has the password the compose
    # file gives it.
    users = [u.split(":")[0] for u in env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"].split(",")]
    assert json.loads(passwords.read_text()) == {u: _default(env[f"S3ARCH_UI_PASSWORD_{u.upper()}"]) for u in users}
    assert "admin" in users

    # Sample logs for the days before today, where each job's first scheduled runs look,
    # skipping a day that has objects already.
    job = load_jobs(ROOT / "dags" / "archive_jobs.yaml")["app_logs"]
    put = {}
    for c in s3_calls:
        if c[2] == "put_object":
            put.setdefault(c[4].rsplit("/", 2)[0] + "/", []).append(c)
    wanted = [today - timedelta(days=n) for n in range(int(env["S3ARCH_SEED_DAYS"]), 0, -1)]
    expected = {job.prefix_for(d) for d in wanted if d.day != 1}
    assert set(put) == expected and len(expected) >= int(env["S3ARCH_SEED_DAYS"]) - 1
    assert all(c[3] == job.source.bucket and c[5] > 0 for calls_ in put.values() for c in calls_)
    assert all(len(calls_) == 48 for calls_ in put.values())  # 24 hours x 2 files


def test_shipped_jobs_file_uses_the_connection_pool_and_buckets_compose_creates():
    from s3arch.ops.jobs import load_jobs

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


def test_deploy_doc_gives_the_executor_settings_the_stacks_run():
    """docs/DEPLOY.md's ini block is what a user copies into airflow.cfg: the same settings."""
    import configparser
    import re

    from devtools.airflow_celery import CELERY_SETTINGS

    block = re.search(r"## Celery.*?```ini\n(.*?)```", (ROOT / "docs" / "DEPLOY.md").read_text(), re.S).group(1)
    ini = configparser.ConfigParser(interpolation=None)
    ini.read_string(block)
    documented = {f"AIRFLOW__{section.upper()}__{key.upper()}": value
                  for section in ini.sections() for key, value in ini[section].items()}
    assert documented == CELERY_SETTINGS


def _airflow_services() -> dict[str, dict]:
    return {n: s for n, s in _compose()["services"].items() if n.startswith("airflow-")}


def test_compose_airflow_services_share_secrets_logs_and_start_the_sample_dags_unpaused():
    """What the first `docker compose up` needs to show task logs and run the sample DAG:
    one secret key and JWT secret for all (a key per container gives 403 on logs), one logs
    volume, the DAGs unpaused as `make airflow` has them."""
    from types import SimpleNamespace

    from devtools.airflow_local import airflow_env

    compose = _compose()
    services = _airflow_services()
    for setting in ("AIRFLOW__API__SECRET_KEY", "AIRFLOW__API_AUTH__JWT_SECRET"):
        values = {_default(s["environment"].get(setting)) for s in services.values()}
        assert len(values) == 1 and values != {"None"} and len(values.pop()) >= 16, (setting, values)
    for name, service in services.items():
        assert "airflow-logs:/opt/airflow/logs" in service["volumes"], name
        assert "./dags:/opt/airflow/dags:ro" in service["volumes"], name
    assert {"airflow-logs", "airflow-auth"} <= compose["volumes"].keys()
    # The api-server reads the passwords airflow-init wrote, from the same volume.
    passwords = Path(services["airflow-apiserver"]["environment"]["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"])
    for name in ("airflow-init", "airflow-apiserver"):
        assert f"airflow-auth:{passwords.parent}" in services[name]["volumes"], name
    # The init service mounts what init.sh reads besides the image: itself and the sample generator.
    mounts = {v.split(":")[1]: v.split(":")[0] for v in services["airflow-init"]["volumes"]}
    assert (ROOT / mounts["/opt/s3arch/docker/init.sh"]).is_file()
    assert (ROOT / mounts["/opt/s3arch/devtools/sample_data.py"]).is_file()

    native = airflow_env(Path("/tmp/home"), SimpleNamespace(access_key="a", secret_key="b", endpoint_url="http://x",
                                                           region="us-east-1", env=lambda: {}), Path("jobs.yaml"))
    for setting in ("AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION", "AIRFLOW__CORE__LOAD_EXAMPLES"):
        for name, service in services.items():
            assert str(service["environment"][setting]).lower() == native[setting].lower(), (name, setting)
    assert native["AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION"] == "False"


def test_compose_images_are_pinned_to_a_release():
    import re

    for name, service in _compose()["services"].items():
        image = service.get("image", "")
        repo, _, tag = image.rpartition(":")
        assert repo and tag and tag != "latest", (name, image)
        assert re.fullmatch(r"\d+\.\d+(\.\d+)?|RELEASE\.[\dTZ-]+|\d+\.\d+\.\d+-airflow\d+\.\d+\.\d+", tag), (name, image)

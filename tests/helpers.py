"""Small helpers the tests share: seeding buckets and running the CLI as a user would."""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def seed(s3, bucket: str, objects: dict[str, bytes]) -> None:
    with ThreadPoolExecutor(32) as pool:
        list(pool.map(lambda kv: s3.put_object(Bucket=bucket, Key=kv[0], Body=kv[1]), objects.items()))


def cli_env_for(server) -> dict[str, str]:
    """The CLI's environment: this process's, its AWS settings those of ``server`` (as root)."""
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(server.env())
    env["PYTHONPATH"] = str(ROOT)
    return env


def run_cli(env, *args, check=True) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "s3arch", *args], env=env, cwd=ROOT,
                          capture_output=True, timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(f"python -m s3arch {' '.join(args)} exited {proc.returncode}:\n"
                             f"{proc.stderr.decode(errors='replace')}")
    return proc


def run_json(env, *args, check=True) -> dict:
    proc = run_cli(env, *args, "--json", check=check)
    return json.loads(proc.stdout.decode().strip().splitlines()[-1])


def day_spec(src: str, dst: str, **options):
    """The engine's spec archiving ``day/`` of ``src`` into ``a/`` of ``dst`` (STANDARD, 64 MiB)."""
    from s3arch.core.config import ArchiveSpec, S3Url

    return ArchiveSpec(S3Url(src, "day/"), S3Url(dst, "a/"), storage_class="STANDARD", memory_budget=64 << 20,
                       **options)


def cli_archive_day(env, src: str, dst: str, *extra, check=False) -> dict:
    """``s3arch archive`` of ``day/`` of ``src`` into ``a/`` of ``dst``, as ``day_spec``; its JSON result."""
    return run_json(env, "archive", f"s3://{src}/day/", f"s3://{dst}/a/", "--storage-class", "STANDARD",
                    "--memory-budget", "64MiB", *extra, check=check)


class TaskInstanceStub:
    """What an archive operator needs of a task instance when called directly: xcom_push, and
    xcom_pull (no task ran before it)."""

    def __init__(self):
        self.pushed = {}

    def xcom_push(self, key, value):
        self.pushed[key] = value

    def xcom_pull(self, task_ids=None, key=None):
        return None


def archive_task(monkeypatch, clients, buckets, operator: str, prefix: str | list[str], **kwargs):
    """The archive DAG's ``operator`` (its class name) archiving ``prefix`` (or a list of them)
    of the source bucket into ``a/`` of the destination, on ``clients``: no Airflow connection."""
    import s3arch_airflow.operators as operators
    from s3arch_airflow.hooks import S3ArchHook

    monkeypatch.setattr(S3ArchHook, "engine_clients", lambda hook: clients)
    src, dst = buckets
    options = {"storage_class": "STANDARD", **kwargs.pop("options", {})}
    return getattr(operators, operator)(task_id="t", source_bucket=src, prefix=prefix, destination=f"s3://{dst}/a/",
                                        options=options, **kwargs)


def keys_in(s3, bucket: str, prefix: str = "") -> list[str]:
    out = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        out += [o["Key"] for o in page.get("Contents", [])]
    return out


def open_uploads(s3, bucket: str) -> list[dict]:
    return s3.list_multipart_uploads(Bucket=bucket).get("Uploads", [])


def read_archive(s3, bucket: str, key: str) -> dict[str, bytes]:
    """Every file member of a .tar.gz archive in S3, read in stream mode (``r|gz``)."""
    import tarfile

    body = s3.get_object(Bucket=bucket, Key=key)["Body"]
    with tarfile.open(fileobj=body, mode="r|gz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}


LOG_TEMPLATE = "logs/{date:%Y/%m/%d}/"


def airflow_with_log_job(minio, home: Path, job_name: str, **job_overrides):
    """Fresh source/destination buckets, a jobs file with one daily log job between them,
    and a prepared local Airflow home (migrated DB, pool, connection s3_archive)."""
    import uuid

    from devtools.airflow_local import write_jobs_file

    s3 = minio.client(max_pool_connections=32)
    suffix = uuid.uuid4().hex[:8]
    src, dst = f"{job_name}-src-{suffix}", f"{job_name}-dst-{suffix}"
    for bucket in (src, dst):
        s3.create_bucket(Bucket=bucket)
    job = {"source": f"s3://{src}/", "prefix_template": LOG_TEMPLATE, "destination": f"s3://{dst}/archive/",
           "storage_class": "STANDARD", "min_age_days": 2, "aws_conn_id": "s3_archive",
           "start_date": "2026-01-01", "retries": 1, "retry_delay_seconds": 1, "memory_budget": "64MiB",
           **job_overrides}
    jobs = write_jobs_file(home / "jobs.yaml", {job_name: job})
    return _prepared_airflow(home, minio, jobs), s3, src, dst


_MIGRATED_DB: list = []  # a copy of the first home's airflow.db as it was just migrated and pooled


def _prepared_airflow(home: Path, minio, jobs: Path):
    """``prepare_airflow``'s home, its DB a copy of the first one this session migrated:
    ``airflow db migrate`` and ``pools set`` are two Airflow CLI starts, about 25 s on a busy
    machine, and give every home the same tables and pool. Each home still has its own DB."""
    import shutil
    import tempfile

    from devtools.airflow_local import LocalAirflow, airflow_env, prepare_airflow

    if not _MIGRATED_DB:
        airflow = prepare_airflow(home, minio, jobs)
        kept = tempfile.TemporaryDirectory(prefix="s3arch-migrated-airflow-")  # removed when the session ends
        shutil.copyfile(home / "airflow.db", Path(kept.name) / "airflow.db")
        _MIGRATED_DB.append(kept)
        return airflow
    home.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(Path(_MIGRATED_DB[0].name) / "airflow.db", home / "airflow.db")
    return LocalAirflow(home, airflow_env(home, minio, jobs))


def dag_bag(dag_folder: str):
    """Airflow's DagBag of ``dag_folder``, from where the running Airflow has it."""
    try:
        from airflow.dag_processing.dagbag import DagBag
    except ImportError:  # Airflow 3.1 (make compat)
        from airflow.models.dagbag import DagBag
    return DagBag(dag_folder=dag_folder)


def use_airflow_home(mp, env: dict[str, str]) -> None:
    """Point this test process's Airflow at a prepared home (``env``: its AIRFLOW_* settings),
    through ``mp`` (a MonkeyPatch). Airflow fixes its metadata DB when it is first imported:
    if an earlier module imported it (an import of s3arch_airflow is enough, even with no home
    set, which means the default ~/airflow with no tables), its settings and ORM are pointed
    here again. Without this the first module to import Airflow picks every later one's DB."""
    for name, value in env.items():
        mp.setenv(name, value)
    settings = sys.modules.get("airflow.settings")
    if settings is not None:
        settings.configure_vars()
        settings.reconfigure_orm()


def put_exact_key(server, bucket: str, key: str, body: bytes) -> None:
    """PUT under exactly ``key``, even with ``.``/``..`` segments that boto3 would normalise
    away: the path is percent-encoded by the engine's own quote_key, then SigV4-signed."""
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials
    from botocore.httpsession import URLLib3Session

    from s3arch.io.dataplane import quote_key

    request = AWSRequest("PUT", f"{server.endpoint_url}/{bucket}/{quote_key(key)}", data=body,
                         headers={"Content-Length": str(len(body))})
    S3SigV4Auth(Credentials(server.access_key, server.secret_key), "s3", server.region).add_auth(request)
    response = URLLib3Session().send(request.prepare())
    assert response.status_code == 200, response.content


def engine_clients(server, endpoint_url: str | None = None, **config):
    """The engine's S3Clients signed for ``server``, optionally reached through another
    endpoint (the fault proxy)."""
    import boto3

    from s3arch.io.s3 import S3Clients

    session = boto3.Session(aws_access_key_id=server.access_key, aws_secret_access_key=server.secret_key,
                            region_name=server.region)
    return S3Clients.from_session(session, endpoint_url or server.endpoint_url, **config)


def minio_user(minio, statements: list[dict]) -> tuple[str, str]:
    """A real MinIO user whose policy is ``statements``."""
    import uuid

    from minio.credentials import StaticProvider
    from minio.minioadmin import MinioAdmin

    admin = MinioAdmin(endpoint=minio.endpoint_url.removeprefix("http://"),
                       credentials=StaticProvider(minio.access_key, minio.secret_key), secure=False)
    user, secret, policy = f"u-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex, f"p-{uuid.uuid4().hex[:8]}"
    admin.user_add(user, secret)
    admin.policy_add(policy, policy={"Version": "2012-10-17", "Statement": statements})
    admin.attach_policy([policy], user=user)
    return user, secret


def policy(name: str, **placeholders: str) -> list[dict]:
    """The statements of the ```json policy:NAME block of docs/SECURITY.md, its placeholders
    (SOURCE_BUCKET=..., ARCHIVE_PREFIX=...) filled: the tests read the page, so the two cannot drift."""
    import re

    text = (ROOT / "docs" / "SECURITY.md").read_text()
    block = re.search(rf"```json policy:{re.escape(name)}\n(.*?)```", text, re.S)
    assert block, f"docs/SECURITY.md has no policy:{name} block"
    body = block.group(1)
    for placeholder, value in placeholders.items():
        body = body.replace(placeholder, value)
    return json.loads(body)["Statement"]


def as_user(cli_env: dict, user: str, secret: str) -> dict:
    """``cli_env`` with the credentials of ``user`` instead."""
    return {**cli_env, "AWS_ACCESS_KEY_ID": user, "AWS_SECRET_ACCESS_KEY": secret}


def user_client(server, user: str, secret: str):
    """A boto3 S3 client of ``server`` signed as ``user``."""
    import boto3

    return boto3.client("s3", endpoint_url=server.endpoint_url, aws_access_key_id=user, aws_secret_access_key=secret,
                        region_name=server.region)


def role_clients(minio, statements: list[dict]):
    """The engine's S3Clients as a new MinIO user whose policy is ``statements``."""
    import boto3

    from s3arch.io.s3 import S3Clients

    user, secret = minio_user(minio, statements)
    session = boto3.Session(aws_access_key_id=user, aws_secret_access_key=secret, region_name=minio.region)
    return S3Clients.from_session(session, minio.endpoint_url)


class InlineProcess:
    """A stand-in for a segment worker's process that runs its target at once, in this
    process: for tests of what the workers' loop gives each worker and makes of its answer
    (its one small message fits the pipe, so nothing waits for a reader)."""

    def __init__(self, target, name, args, daemon):
        self.target, self.args, self.exitcode = target, args, None

    def start(self):
        self.target(*self.args)

    def is_alive(self):
        return False

    def join(self):
        self.exitcode = 0

    def kill(self):
        pass


def run_segment_workers_inline(monkeypatch, worker) -> None:
    """``s3arch.produce.segments.workers`` starts ``worker(spec, connection, layout, plan, k, send)``
    in an InlineProcess instead of ``segment_worker`` in a forked one."""
    import multiprocessing

    import s3arch.produce.segments.workers as workers

    class Context:
        Pipe = staticmethod(multiprocessing.get_context("fork").Pipe)
        Process = InlineProcess

    monkeypatch.setattr(workers.multiprocessing, "get_context", lambda method: Context)
    monkeypatch.setattr(workers, "segment_worker", worker)


def run_one_segment_inline(monkeypatch, worker) -> dict:
    """A plan of one segment run by the CLI's workers loop, ``worker`` (as
    ``run_segment_workers_inline`` takes it) standing for its process; the loop's result."""
    import s3arch.produce.segments.workers as workers
    from s3arch.core.coordinator import StreamCoordinator
    from s3arch.produce.segments import SegmentPlan, SegmentRange

    run_segment_workers_inline(monkeypatch, worker)
    monkeypatch.setattr(workers, "worker_connection", lambda clients, server: {})
    plan = SegmentPlan("run", "upload", "a.tar.gz", 1, 1, 1024, 0, (SegmentRange(0, None, "k", 1, 1, 0, 512, 2, 10),))
    return workers.run_workers(None, None, None, plan, 1, StreamCoordinator("the segments"))


def make_ca_and_certificate(directory: Path, names: list[str]) -> tuple[Path, Path, Path]:
    """A throwaway CA and a server certificate it signed for ``names`` (DNS names, wildcards or
    IP addresses): (CA file, certificate file, key file), PEM, in ``directory``."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    def san(name: str) -> x509.GeneralName:
        try:
            return x509.IPAddress(ipaddress.ip_address(name))
        except ValueError:
            return x509.DNSName(name)

    now = datetime.datetime.now(datetime.timezone.utc)
    valid = dict(not_valid_before=now - datetime.timedelta(minutes=5), not_valid_after=now + datetime.timedelta(days=2))
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "s3arch test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(valid["not_valid_before"])
          .not_valid_after(valid["not_valid_after"])
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(valid["not_valid_before"]).not_valid_after(valid["not_valid_after"])
            .add_extension(x509.SubjectAlternativeName([san(n) for n in names]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    ca_file, cert_file, key_file = directory / "ca.pem", directory / "server.pem", directory / "server.key"
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return ca_file, cert_file, key_file


def planned_listing_starts(monkeypatch) -> list:
    """Where each plan's listing of the source starts (``start_after``: None for the first key)."""
    import s3arch.produce.segments.plan

    source_listing, started_after = s3arch.produce.segments.plan.source_listing, []

    def recorded_listing(*args, **kwargs):
        started_after.append(kwargs.get("start_after"))
        return source_listing(*args, **kwargs)

    monkeypatch.setattr(s3arch.produce.segments.plan, "source_listing", recorded_listing)
    return started_after

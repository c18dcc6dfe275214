"""Least privilege for every DAG (docs/SECURITY.md, "IAM policies"): each role's policy, read
from the page, goes to a user holding exactly it, who runs what that duty runs through the
job's connection of the duty (``aws_conn_id``, ``restore_conn_id``, ``catalog_conn_id``).

On MinIO, which enforces user policies with their conditions: the archive DAG (a range under
GOVERNANCE, then a late part), a ``segments`` job's archive DAG sized from its S3 Inventory,
the restore DAG to S3, ``extract`` to S3 and to a directory, ``cat``, the catalog's reads (the
inventory's too), the scrub DAG and ``scrub``, ``plan`` from an inventory and by listing; the
archive role on a restore connection fails the restore at once, without a retry. MinIO has no Glacier restore (its archives need none, so no
request is sent): on moto server with IAM enforced (it ignores ``StringLike`` conditions, so
they are MinIO's to prove), ``restore`` and the restore DAG from GLACIER, its wait on the trigger
included, run as the restore role, and the archive role is refused ``s3:RestoreObject``.
"""

from __future__ import annotations

import dataclasses
import json
import urllib.request
import uuid
from datetime import date, datetime, timezone
from types import SimpleNamespace

import pytest

from devtools.sample_data import seed_day
from helpers import (LOG_TEMPLATE, ROOT, airflow_with_log_job, as_user, cli_env_for, keys_in, minio_user, policy,
                     read_archive, run_cli, run_json, seed, use_airflow_home, user_client)

JOB, INVENTORY_JOB, MISWIRED_JOB, GLACIER_JOB = "duty", "dutyinv", "dutymiswired", "dutyglacier"
INVENTORY = "inventories/{src}/daily-all/"
STANDARD = ("--storage-class", "STANDARD")
# Archived in the module's fixture (as root, under the job's lock) for the restore, the
# catalog and the scrub; the archive DAG tests archive days of their own.
ARCHIVED = (date(2026, 10, 12), date(2026, 10, 13))


def connection(server, user: str, secret: str) -> str:
    """An Airflow aws connection (AIRFLOW_CONN_... JSON) signed as ``user`` on ``server``."""
    return json.dumps({"conn_type": "aws", "login": user, "password": secret,
                       "extra": {"endpoint_url": server.endpoint_url, "region_name": server.region}})


def day_prefix(day: date) -> str:
    return f"{day:logs/%Y/%m/%d}/"


@pytest.fixture(scope="module")
def duties(minio, tmp_path_factory):
    """One Airflow home for the module; its jobs archive one source into an Object Lock bucket,
    each duty on a connection whose MinIO user holds exactly its role of docs/SECURITY.md:

    - ``duty``: archive role, restore role, catalog + scrub roles; GOVERNANCE for a day.
    - ``dutyinv``: a ``segments`` job with an inventory: archive + inventory, catalog + inventory.
    - ``dutymiswired``: the archive role on its restore connection too.
    """
    from devtools.airflow_local import write_jobs_file

    cli_env = cli_env_for(minio)
    airflow, s3, src, back = airflow_with_log_job(minio, tmp_path_factory.mktemp("duties-home"), JOB)
    suffix = uuid.uuid4().hex[:8]
    vault, inv = f"duty-vault-{suffix}", f"duty-inv-{suffix}"
    s3.create_bucket(Bucket=vault, ObjectLockEnabledForBucket=True)
    s3.create_bucket(Bucket=inv)
    names = dict(SOURCE_BUCKET=src, SOURCE_PREFIX="logs/", ARCHIVE_BUCKET=vault, ARCHIVE_PREFIX="archive/",
                 RESTORE_BUCKET=back, RESTORE_PREFIX="day/", INVENTORY_BUCKET=inv,
                 INVENTORY_PREFIX=INVENTORY.format(src=src))
    roles = {
        "archive": policy("archive", **names),
        "archive_inventory": policy("archive", **names) + policy("inventory", **names),
        "restore": policy("restore", **names),
        "catalog_scrub": policy("catalog", **names) + policy("scrub-extra", **names),
        "catalog_inventory": policy("catalog", **names) + policy("inventory", **names),
        "catalog": policy("catalog", **names),
        "inventory": policy("inventory", **names),
    }
    users = {role: minio_user(minio, statements) for role, statements in roles.items()}
    base = {"source": f"s3://{src}/", "prefix_template": LOG_TEMPLATE, "destination": f"s3://{vault}/archive/",
            "storage_class": "STANDARD", "min_age_days": 2, "start_date": "2026-01-01", "retries": 1,
            "retry_delay_seconds": 1, "memory_budget": "64MiB"}
    jobs = {
        JOB: {**base, "object_lock": "GOVERNANCE", "retain_days": 1, "aws_conn_id": "duty_archive",
              "restore_conn_id": "duty_restore", "catalog_conn_id": "duty_catalog_scrub"},
        INVENTORY_JOB: {**base, "inventory": f"s3://{inv}/{INVENTORY.format(src=src)}", "segments": 2,
                        "segment_min_objects": 5, "aws_conn_id": "duty_archive_inventory",
                        "catalog_conn_id": "duty_catalog_inventory"},
        MISWIRED_JOB: {**base, "aws_conn_id": "duty_archive", "restore_conn_id": "duty_archive"},
    }
    jobs_file = write_jobs_file(airflow.home / "jobs.yaml", jobs)  # the file the home's S3ARCH_JOBS_FILE names

    # The days the restore, catalog and scrub read: archived as the job does, under its lock,
    # 10-12 in two parts (a late object after the first); a tagged object comes back tagged.
    seeded: dict[str, bytes] = {}
    for day in ARCHIVED:
        seeded.update(seed_day(s3, src, LOG_TEMPLATE, day, files_per_hour=1, lines_per_file=10))
    s3.put_object(Bucket=src, Key="logs/2026/10/12/tagged.log", Body=b"t", Tagging="team=ops")
    seeded["logs/2026/10/12/tagged.log"] = b"t"
    locked = ("--object-lock", "GOVERNANCE", "--retain-days", "1")
    for day in ARCHIVED:
        run_cli(cli_env, "archive", f"s3://{src}/{day_prefix(day)}", f"s3://{vault}/archive/", *STANDARD,
                *locked)
    seed(s3, src, {"logs/2026/10/12/late.log": b"late\n"})
    seeded["logs/2026/10/12/late.log"] = b"late\n"
    assert run_json(cli_env, "archive", f"s3://{src}/logs/2026/10/12/", f"s3://{vault}/archive/", *STANDARD,
                    *locked)["part"] == 2

    with pytest.MonkeyPatch.context() as mp:
        use_airflow_home(mp, airflow.env)
        mp.syspath_prepend(str(ROOT / "plugins"))  # as Airflow's plugins folder is for its processes
        # No root credentials in this process: a task that used any but its duty's would fail.
        for name in ("AIRFLOW_CONN_S3_ARCHIVE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            mp.delenv(name, raising=False)
        for role, (user, secret) in users.items():
            mp.setenv(f"AIRFLOW_CONN_DUTY_{role.upper()}", connection(minio, user, secret))
        yield SimpleNamespace(airflow=airflow, s3=s3, src=src, vault=vault, back=back, inv=inv, names=names,
                              users=users, jobs=jobs, jobs_file=jobs_file, seeded=seeded, mp=mp)


def run_dag(dag_id: str, *, logical: date = date(2026, 11, 1), conf: dict | None = None):
    """dag.test() one run of ``dag_id``; returns (run, {task_id or (task_id, map_index): ti})."""
    from airflow.models import TaskInstance
    from airflow.utils.session import create_session

    from helpers import dag_bag

    bag = dag_bag(str(ROOT / "dags"))
    assert not bag.import_errors, bag.import_errors
    run = bag.dags[dag_id].test(logical_date=datetime.combine(logical, datetime.min.time(), tzinfo=timezone.utc),
                                run_conf=conf or {})
    with create_session() as session:
        tis = session.query(TaskInstance).filter_by(dag_id=dag_id, run_id=run.run_id).all()
        session.expunge_all()
    return run, {(ti.task_id if ti.map_index < 0 else (ti.task_id, ti.map_index)): ti for ti in tis}


def xcom(run, task_id: str, key: str = "return_value", map_index: int = -1):
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        value = session.query(XComModel.value).filter_by(dag_id=run.dag_id, run_id=run.run_id, task_id=task_id,
                                                         map_index=map_index, key=key).scalar()
    return json.loads(value) if isinstance(value, str) else value


def day_objects(duties, day: date) -> dict[str, bytes]:
    return {k: v for k, v in duties.seeded.items() if k.startswith(day_prefix(day))}


# --- Archive role: aws_conn_id ---------------------------------------------------------------


@pytest.mark.slow  # two whole DagRuns through dag.test()
def test_the_archive_dag_runs_as_the_archive_role_locked_and_with_a_late_part(duties):
    s3, src, vault = duties.s3, duties.src, duties.vault
    days = (date(2026, 10, 5), date(2026, 10, 6))
    for day in days:
        duties.seeded.update(seed_day(s3, src, LOG_TEMPLATE, day, files_per_hour=1, lines_per_file=10))
    run, tis = run_dag(f"s3_archive__{JOB}", conf={"date_from": "2026-10-05", "date_to": "2026-10-06"})
    assert run.state == "success", tis
    assert [(r["prefix"], r["status"]) for r in xcom(run, "report")] == [(day_prefix(d), "archived") for d in days]
    for day in days:
        stem = f"archive/{src}/{day:logs/%Y/%m/%d}"
        assert read_archive(s3, vault, f"{stem}.tar.gz") == day_objects(duties, day)
        assert s3.head_object(Bucket=vault, Key=f"{stem}.tar.gz")["ObjectLockMode"] == "GOVERNANCE"
    assert not [k for k in keys_in(s3, vault, "archive/") if k.endswith(".lease.json")]  # its scratch removed

    # A late object: the next nightly run of the day (its plan task) archives it as part 2.
    seed(s3, src, {"logs/2026/10/05/late.log": b"late\n"})
    run, tis = run_dag(f"s3_archive__{JOB}", logical=date(2026, 10, 7))
    assert run.state == "success", tis
    rows = xcom(run, "plan", "archive_rows")
    assert [(r["prefix"], r["status"]) for r in rows] == [("logs/2026/10/05/", "archived")]
    assert rows[0]["archive"].endswith("05.part-0002.tar.gz") and rows[0]["retention"]["mode"] == "GOVERNANCE"
    assert read_archive(s3, vault, f"archive/{src}/logs/2026/10/05.part-0002.tar.gz") == {
        "logs/2026/10/05/late.log": b"late\n"}


@pytest.mark.slow  # a whole DagRun through dag.test(), with segment tasks
def test_a_segments_jobs_dag_is_sized_from_its_inventory_as_archive_plus_inventory(duties):
    from devtools.inventory_reports import write_report

    s3, src, vault = duties.s3, duties.src, duties.vault
    # Both days are large (5 objects or more) in the source; the report holds 10-19 alone, so
    # read as the sizing must, 10-20 is empty (the report covers it), and a listing is not asked.
    large = {f"logs/2026/10/19/{i}.log": b"big %d\n" % i * 100 for i in range(6)}
    small = {f"logs/2026/10/20/{i}.log": b"small\n" for i in range(5)}
    seed(s3, src, {**large, **small})
    write_report(s3, duties.inv, INVENTORY.format(src=src), src, [(k, len(v)) for k, v in large.items()],
                 created=datetime.now(timezone.utc))
    run, tis = run_dag(f"s3_archive__{INVENTORY_JOB}", conf={"date_from": "2026-10-19", "date_to": "2026-10-20"})
    assert run.state == "success", tis
    assert xcom(run, "size") == ["logs/2026/10/19/"]  # the large prefix, as the report sized it
    assert {key if isinstance(key, str) else key[0] for key in tis} >= {"size", "prepare", "segment", "assemble"}
    assert read_archive(s3, vault, f"archive/{src}/logs/2026/10/19.tar.gz") == large
    assert read_archive(s3, vault, f"archive/{src}/logs/2026/10/20.tar.gz") == small


def test_plan_needs_only_the_inventory_role(duties, cli_env):
    from devtools.inventory_reports import write_report

    src = duties.src
    write_report(duties.s3, duties.inv, INVENTORY.format(src=src), src,
                 [("logs/2026/10/26/a.log", 3), ("logs/2026/10/26/b.log", 4)], created=datetime.now(timezone.utc))
    env = as_user(cli_env, *duties.users["inventory"])
    out = run_json(env, "plan", INVENTORY_JOB, "--jobs-file", str(duties.jobs_file), "--from", "2026-10-26",
                   "--to", "2026-10-26")
    assert [(d["prefix"], d["objects"]) for d in out["days"]] == [("logs/2026/10/26/", 2)]


def test_plan_of_a_job_without_an_inventory_lists_its_days_as_the_catalog_role(duties, cli_env):
    env = as_user(cli_env, *duties.users["catalog"])
    out = run_json(env, "plan", JOB, "--jobs-file", str(duties.jobs_file), "--from", "2026-10-12", "--to", "2026-10-13")
    assert out["source"] == "listing" and [(d["day"], d["objects"]) for d in out["days"]] == [
        ("2026-10-12", len(day_objects(duties, date(2026, 10, 12)))),
        ("2026-10-13", len(day_objects(duties, date(2026, 10, 13))))]


# --- Restore role: restore_conn_id -----------------------------------------------------------


@pytest.mark.slow  # a whole DagRun through dag.test()
def test_the_restore_dag_extracts_to_s3_as_the_restore_role(duties):
    s3, back = duties.s3, duties.back
    run, tis = run_dag(f"s3_restore__{JOB}", conf={"date_from": "2026-10-12", "date_to": "2026-10-13",
                                                   "target": f"s3://{back}/day/"})
    assert run.state == "success", tis
    rows = xcom(run, "report")
    assert [(r["prefix"], r["status"]) for r in rows] == [(day_prefix(d), "restored") for d in ARCHIVED]
    expected = {f"day/{k}": v for d in ARCHIVED for k, v in day_objects(duties, d).items()}
    assert {k: s3.get_object(Bucket=back, Key=k)["Body"].read() for k in keys_in(s3, back, "day/")} == expected
    assert s3.get_object_tagging(Bucket=back, Key="day/logs/2026/10/12/tagged.log")["TagSet"] == [
        {"Key": "team", "Value": "ops"}]


def test_extract_to_a_directory_ls_verify_and_cat_run_as_the_restore_role(duties, cli_env, tmp_path):
    env = as_user(cli_env, *duties.users["restore"])
    manifest = f"s3://{duties.vault}/archive/{duties.src}/logs/2026/10/12.manifest.jsonl.gz"
    expected = day_objects(duties, ARCHIVED[0])
    assert run_json(env, "verify", manifest)["objects"] == len(expected) - 1  # part 1: all but the late one
    assert "team=ops" in run_cli(env, "ls", "--long", manifest).stdout.decode()
    out = tmp_path / "out"
    assert run_json(env, "extract", manifest, "--to-dir", str(out))["objects"] == len(expected)
    assert {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()} == {
        k.removeprefix("logs/2026/10/12/"): v for k, v in expected.items()}
    assert run_cli(env, "cat", manifest, "logs/2026/10/12/late.log").stdout == b"late\n"  # from part 2
    # STANDARD needs no restore: said, and no RestoreObject is sent (MinIO has none; moto below).
    assert "no restore needed" in run_cli(env, "restore", manifest).stdout.decode()


@pytest.mark.slow  # a whole DagRun through dag.test()
def test_the_archive_role_on_the_restore_connection_fails_the_restore_at_once_without_retry(duties):
    run, tis = run_dag(f"s3_restore__{MISWIRED_JOB}", conf={"date_from": "2026-10-13", "date_to": "2026-10-13",
                                                            "target": f"s3://{duties.back}/miswired/"})
    assert run.state == "failed"
    restore = tis[("restore", 0)]
    assert restore.state == "failed" and restore.try_number == 1 and restore.max_tries >= 1  # retries=1, unspent
    row = xcom(run, "restore", "restore_rows", map_index=0)[0]
    assert row["status"] == "failed" and row["retryable"] is False
    assert "access denied" in row["error"].lower() and duties.back in row["error"], row["error"]
    assert keys_in(duties.s3, duties.back, "miswired/") == []


# --- Catalog and scrub roles: catalog_conn_id -------------------------------------------------


def test_the_catalog_reads_archives_and_the_inventory_as_the_catalog_role(duties):
    from devtools.inventory_reports import write_report
    from s3arch.ops.catalog.job_catalog import Catalog
    from s3arch.ops.catalog.view import ARCHIVED as ARCHIVED_STATE
    from s3arch.ops.jobs import load_jobs
    from s3arch_airflow import catalog_app

    src = duties.src
    write_report(duties.s3, duties.inv, INVENTORY.format(src=src), src, [("logs/2026/10/27/x.log", 9)],
                 created=datetime.now(timezone.utc))
    jobs = load_jobs(duties.jobs_file)
    # Both jobs archive into the same place: the days the fixture archived are theirs.
    blind = dataclasses.replace(jobs[INVENTORY_JOB], name="dutyinv-blind", catalog_conn_id="duty_catalog")
    views = {}
    for job in (jobs[JOB], jobs[INVENTORY_JOB], blind):
        views[job.name] = Catalog(job, catalog_app.store_for(job)).view(ARCHIVED[0], ARCHIVED[-1],
                                                                          today=date(2026, 11, 27))
        assert [d.state for d in views[job.name].days] == [ARCHIVED_STATE, ARCHIVED_STATE], job.name
    shown = views[INVENTORY_JOB].to_dict()["inventory"]  # catalog + inventory reads the report
    assert "problem" not in shown and [d["day"] for d in shown["unarchived"]] == ["2026-10-27"]
    # Without the inventory statements the catalog still shows the archives, and says why the
    # inventory is missing.
    assert "denied" in views[blind.name].to_dict()["inventory"]["problem"].lower()


@pytest.mark.slow  # a whole DagRun through dag.test()
def test_the_scrub_dag_checks_locked_archives_as_the_catalog_and_scrub_role(duties):
    run, tis = run_dag(f"s3_scrub__{JOB}", conf={"date_from": "2026-10-12", "date_to": "2026-10-13", "sample": 2})
    assert run.state == "success", tis
    result = xcom(run, "scrub")
    assert result["checked"] == 3 and result["sampled"] >= 2, result  # two days, one with a late part
    results = f"archive/{duties.src}/logs/_s3arch-scrub/{JOB}/"
    assert f"{results}latest.json" in keys_in(duties.s3, duties.vault, results)


def test_the_scrub_command_checks_a_range_and_one_late_part_as_the_catalog_and_scrub_role(duties, cli_env):
    env = as_user(cli_env, *duties.users["catalog_scrub"])
    days = run_json(env, "scrub", "--job", JOB, "--jobs-file", str(duties.jobs_file), "--date-from", "2026-10-12",
                    "--date-to", "2026-10-13", "--sample", "2")
    assert days["status"] == "clean" and days["checked"] == 3 and days["sampled"] >= 2, days  # and the late part
    assert days["result_url"].startswith(f"s3://{duties.vault}/archive/{duties.src}/logs/_s3arch-scrub/{JOB}/")
    part = run_json(env, "scrub", f"s3://{duties.vault}/archive/{duties.src}/logs/2026/10/12.part-0002.tar.gz",
                    "--job", JOB, "--jobs-file", str(duties.jobs_file))  # its jobs share the archives: named
    assert part["status"] == "clean" and part["verified"] == ["2026-10-12"] and part["result_url"] is None, part


# --- RestoreObject: moto server with IAM enforced ---------------------------------------------


def enforce_iam(server, count: str) -> None:
    """moto server checks every request after the next ``count`` against IAM ("inf": none)."""
    request = urllib.request.Request(f"{server.endpoint_url}/moto-api/reset-auth", data=count.encode(), method="POST",
                                     headers={"Content-Type": "text/plain"})  # not a form: moto reads the body
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200


def moto_user(iam, statements: list[dict]) -> tuple[str, str]:
    name = f"u-{uuid.uuid4().hex[:8]}"
    iam.create_user(UserName=name)
    iam.put_user_policy(UserName=name, PolicyName="role",
                        PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": statements}))
    key = iam.create_access_key(UserName=name)["AccessKey"]
    return key["AccessKeyId"], key["SecretAccessKey"]


@pytest.fixture(scope="module")
def glacier(duties):
    """A moto server of the module's own, enforcing IAM once set up: a day archived in GLACIER,
    the job ``dutyglacier`` whose restore connection is a user with the restore role (through
    a proxy that can hold a restore "ongoing"), and users with the archive role and everything."""
    import boto3

    from devtools.airflow_local import write_jobs_file
    from devtools.servers import start_moto
    from faultproxy import FaultProxy

    server = start_moto()
    proxy = FaultProxy(server.endpoint_url)
    try:
        s3 = server.client()
        src, vault, back = "g-src", "g-vault", "g-back"
        for bucket in (src, vault, back):
            s3.create_bucket(Bucket=bucket)
        day = date(2026, 10, 12)
        objects = seed_day(s3, src, LOG_TEMPLATE, day, files_per_hour=1, lines_per_file=10)
        env = cli_env_for(server)
        run_cli(env, "archive", f"s3://{src}/{day_prefix(day)}", f"s3://{vault}/archive/", "--storage-class",
                "GLACIER")
        names = dict(SOURCE_BUCKET=src, SOURCE_PREFIX="logs/", ARCHIVE_BUCKET=vault, ARCHIVE_PREFIX="archive/",
                     RESTORE_BUCKET=back, RESTORE_PREFIX="day/")
        iam = boto3.client("iam", endpoint_url=server.endpoint_url, aws_access_key_id=server.access_key,
                           aws_secret_access_key=server.secret_key, region_name=server.region)
        users = {"restore": moto_user(iam, policy("restore", **names)),
                 "archive": moto_user(iam, policy("archive", **names)),
                 "admin": moto_user(iam, [{"Effect": "Allow", "Action": ["s3:*"], "Resource": ["*"]}])}
        through_proxy = dataclasses.replace(server, endpoint_url=proxy.endpoint_url)
        duties.mp.setenv("AIRFLOW_CONN_DUTY_MOTO_RESTORE", connection(through_proxy, *users["restore"]))
        write_jobs_file(duties.jobs_file, {**duties.jobs, GLACIER_JOB: {
            "source": f"s3://{src}/", "prefix_template": LOG_TEMPLATE, "destination": f"s3://{vault}/archive/",
            "storage_class": "GLACIER", "min_age_days": 2, "start_date": "2026-01-01", "retries": 1,
            "retry_delay_seconds": 1, "memory_budget": "64MiB", "poll_interval": 0.5,
            "aws_conn_id": "duty_none", "restore_conn_id": "duty_moto_restore"}})  # no such archive connection
        enforce_iam(server, "0")
        admin = user_client(server, *users["admin"])
        yield SimpleNamespace(server=server, proxy=proxy, env=env, admin=admin, users=users, vault=vault, back=back,
                              src=src, day=day, objects=objects,
                              manifest=f"s3://{vault}/archive/{src}/logs/2026/10/12.manifest.jsonl.gz")
    finally:
        proxy.stop()
        server.stop()


def test_moto_enforces_the_policies_it_is_given(glacier):
    """What the moto proofs rest on: with IAM enforced, an action outside a user's policy is
    refused, and an unknown key is."""
    restore = user_client(glacier.server, *glacier.users["restore"])
    with pytest.raises(restore.exceptions.ClientError, match="AccessDenied"):
        restore.put_object(Bucket=glacier.vault, Key="archive/x", Body=b"x")
    root = glacier.server.client()
    with pytest.raises(root.exceptions.ClientError, match="InvalidAccessKeyId|InvalidClientTokenId|AccessDenied"):
        root.list_objects_v2(Bucket=glacier.vault)


def test_restore_from_glacier_is_asked_by_the_restore_role_and_refused_to_the_archive_role(glacier):
    requested = run_json(as_user(glacier.env, *glacier.users["restore"]), "restore", glacier.manifest, "--tier",
                         "Bulk")
    assert requested["storage_class"] == "GLACIER" and requested["requested"] == "requested", requested
    refused = run_cli(as_user(glacier.env, *glacier.users["archive"]), "restore", glacier.manifest, "--tier", "Bulk",
                      check=False)
    message = refused.stderr.decode()
    assert refused.returncode == 2 and "Traceback" not in message, message
    # The request, the key and the permission to grant are named.
    archive = glacier.manifest.replace('.manifest.jsonl.gz', '.tar.gz')
    assert f"restore {archive} (s3:RestoreObject): access denied" in message, message


@pytest.mark.slow  # a whole DagRun through dag.test(), deferred on the trigger
def test_the_restore_dag_asks_waits_and_extracts_from_glacier_as_the_restore_role(glacier, duties):
    from faultproxy import Fault

    # The first HEAD after the restore request and the trigger's first poll see "ongoing".
    ongoing = glacier.proxy.add(Fault("header", headers={"x-amz-restore": 'ongoing-request="true"'}, after=1,
                                      count=2, match=lambda r: r.method == "HEAD" and r.key.endswith("10/12.tar.gz")))
    run, tis = run_dag(f"s3_restore__{GLACIER_JOB}", conf={"date_from": "2026-10-12", "date_to": "2026-10-12",
                                                           "target": f"s3://{glacier.back}/day/", "tier": "Bulk"})
    assert run.state == "success", tis
    assert ongoing.injected == 2, "the restore was never seen in progress, so nothing waited"
    admin = glacier.admin
    got = {k: admin.get_object(Bucket=glacier.back, Key=k)["Body"].read() for k in keys_in(admin, glacier.back)}
    assert got == {f"day/{k}": v for k, v in glacier.objects.items()}

"""The archive DAG run with dag.test() against the embedded MinIO, as an operator would use it.

Airflow is imported only inside the fixtures, after AIRFLOW_HOME points at a throwaway home
with a migrated SQLite DB, this repo's dags/ and plugins/, and a jobs file for the test's
buckets.
"""

from __future__ import annotations

import json
import re
import time
from datetime import date, datetime, timedelta, timezone

import pytest

from devtools.sample_data import seed_day
from helpers import (LOG_TEMPLATE as TEMPLATE, ROOT, TaskInstanceStub, airflow_with_log_job, keys_in, read_archive,
                     use_airflow_home)

DAG_ID = "s3_archive__logs"


@pytest.fixture(scope="module")
def af(minio, tmp_path_factory):
    """A local Airflow home whose one job archives src/logs/YYYY/MM/DD/ into dst/archive/."""
    airflow, s3, src, dst = airflow_with_log_job(minio, tmp_path_factory.mktemp("airflow-home"), "logs")
    with pytest.MonkeyPatch.context() as mp:
        use_airflow_home(mp, airflow.env)
        airflow.s3, airflow.src, airflow.dst, airflow.seeded = s3, src, dst, {}
        yield airflow


def seed(af, *days: date) -> None:
    for day in days:
        af.seeded.update(seed_day(af.s3, af.src, TEMPLATE, day, files_per_hour=2, lines_per_file=20))


def run_dag(af, *, logical: date = date(2026, 10, 1), conf: dict | None = None):
    """dag.test() one run; return {task_id or (task_id, map_index): task instance}."""
    from helpers import dag_bag
    from airflow.models import TaskInstance
    from airflow.utils.session import create_session

    bag = dag_bag(str(ROOT / "dags"))
    assert not bag.import_errors, bag.import_errors
    dag = bag.dags[DAG_ID]
    run = dag.test(logical_date=datetime.combine(logical, datetime.min.time(), tzinfo=timezone.utc),
                   run_conf=conf or {})
    with create_session() as session:
        tis = session.query(TaskInstance).filter_by(dag_id=DAG_ID, run_id=run.run_id).all()
        session.expunge_all()
    return run, {(ti.task_id if ti.map_index < 0 else (ti.task_id, ti.map_index)): ti for ti in tis}


def archived_day(af, day: date) -> dict[str, bytes]:
    return read_archive(af.s3, af.dst, f"archive/{af.src}/{day:logs/%Y/%m/%d}.tar.gz")


def manifest_modified(af, day: date):
    return af.s3.head_object(Bucket=af.dst, Key=f"archive/{af.src}/{day:logs/%Y/%m/%d}.manifest.jsonl.gz")["LastModified"]


def xcom_rows(run, task_id: str = "report", key: str = "return_value", map_index: int = -1) -> list[dict]:
    """Rows a task of ``run`` pushed: the report's table, or an archive task's archive_rows."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        value = session.query(XComModel.value).filter_by(
            dag_id=DAG_ID, run_id=run.run_id, task_id=task_id, map_index=map_index, key=key).scalar()
    return json.loads(value) if isinstance(value, str) else value


@pytest.mark.slow  # a whole DagRun through dag.test(), every task archiving: end to end
def test_scheduled_run_archives_logical_date_minus_the_jobs_age_in_its_plan_task(af):
    """A run of one logical date is archived and reported by its plan task: one task
    instance, no archive or report task runs, the plan's rows list the day."""
    day = date(2026, 10, 3)
    seed(af, day)
    run, tis = run_dag(af, logical=day + timedelta(days=2))
    assert run.state == "success"
    assert tis["plan"].state == "success" and tis["archive"].state == tis["report"].state == "skipped"
    rows = xcom_rows(run, "plan", "archive_rows")
    assert [(r["prefix"], r["status"]) for r in rows] == [("logs/2026/10/03/", "archived")]
    source = {k: v for k, v in af.seeded.items() if k.startswith("logs/2026/10/03/")}
    assert archived_day(af, day) == source


@pytest.mark.slow  # a whole DagRun through dag.test(): end to end
def test_dry_run_of_one_logical_date_in_its_plan_task_writes_nothing(af):
    """The plan task that archives a one-day run honours the form's dry run: the day is listed
    and estimated, the run is green, and nothing lands in the destination (no lease either)."""
    from helpers import open_uploads

    day = date(2026, 10, 21)
    seed(af, day)
    run, tis = run_dag(af, logical=day + timedelta(days=2), conf={"dry_run": True})
    assert run.state == "success" and tis["plan"].state == "success"
    rows = xcom_rows(run, "plan", "archive_rows")
    assert [(r["prefix"], r["status"]) for r in rows] == [("logs/2026/10/21/", "dry_run")]
    assert keys_in(af.s3, af.dst, f"archive/{af.src}/logs/2026/10/21") == []
    assert open_uploads(af.s3, af.dst) == []


@pytest.mark.slow  # a whole DagRun through dag.test(), every task archiving: end to end
def test_one_day_run_whose_day_fails_in_its_plan_task_is_reported_failed_by_the_report(af):
    """The plan task reports only a day it archived: a day that fails (here: no objects, a
    permanent error) leaves the report to run, list the day failed and fail the run."""
    run, tis = run_dag(af, logical=date(2026, 10, 26))  # 2026-10-24: nothing seeded
    assert run.state == "failed"
    assert tis["plan"].state == "failed" and tis["report"].state == "failed"
    rows = xcom_rows(run, "plan", "archive_rows")
    assert [(r["prefix"], r["status"]) for r in rows] == [("logs/2026/10/24/", "failed")]


@pytest.mark.slow  # a whole DagRun through dag.test(), every task archiving: end to end
def test_range_run_maps_one_task_per_date_named_by_prefix_and_rerun_skips(af):
    days = [date(2026, 10, 6), date(2026, 10, 7), date(2026, 10, 8)]
    seed(af, *days)
    run, tis = run_dag(af, conf={"date_from": "2026-10-06", "date_to": "2026-10-08"})
    assert run.state == "success"
    names = sorted(ti.rendered_map_index for key, ti in tis.items() if key[0] == "archive")
    assert names == ["logs/2026/10/06/", "logs/2026/10/07/", "logs/2026/10/08/"]
    # A job without segment tasks has nothing to size: each task instance started costs Airflow seconds.
    assert {key if isinstance(key, str) else key[0] for key in tis} == {"plan", "archive", "report"}
    for day in days:
        assert archived_day(af, day) == {k: v for k, v in af.seeded.items() if k.startswith(f"{day:logs/%Y/%m/%d}/")}
    before = [manifest_modified(af, d) for d in days]
    for row in xcom_rows(run):  # the report's rows carry what each archive costs against the objects
        assert row["cost"]["objects"] == row["objects"] and row["cost"]["archive_monthly"] > 0
        assert row["cost"]["separate_requests"] > row["cost"]["archive_requests"]

    again, tis = run_dag(af, conf={"date_from": "2026-10-06", "date_to": "2026-10-08"})
    assert again.state == "success"
    assert [manifest_modified(af, d) for d in days] == before
    rows = xcom_rows(again)
    assert [(r["prefix"], r["status"]) for r in rows] == [(f"{d:logs/%Y/%m/%d}/", "skipped") for d in days]
    # Each archive made (not the skips) is an asset event, through the job's alias, with its figures.
    uris = [f"s3://{af.dst}/archive/{af.src}/{d:logs/%Y/%m/%d}.tar.gz" for d in days]
    events = asset_events(uris)
    assert sorted(e.asset.uri for e in events) == uris
    for event in events:
        assert event.extra["objects"] == len([k for k in af.seeded if k.startswith(event.extra["prefix"])])
        assert event.extra["archive"] == event.asset.uri and event.extra["bytes_out"] > 0


def asset_events(uris: list[str]):
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy.orm import joinedload

    with create_session() as session:
        events = (session.query(AssetEvent).join(AssetModel, AssetEvent.asset_id == AssetModel.id)
                  .filter(AssetModel.uri.in_(uris)).options(joinedload(AssetEvent.asset)).all())
        session.expunge_all()
    return events




@pytest.mark.slow  # a whole DagRun through dag.test(), every task archiving: end to end
def test_permanent_failure_of_one_prefix_does_not_stop_the_others_and_fails_the_run(af):
    seed(af, date(2026, 10, 10), date(2026, 10, 12))  # 10-11 has no objects: a permanent error
    run, tis = run_dag(af, conf={"date_from": "2026-10-10", "date_to": "2026-10-12"})
    assert run.state == "failed"
    by_prefix = {ti.rendered_map_index: ti for key, ti in tis.items() if key[0] == "archive"}
    assert by_prefix["logs/2026/10/11/"].state == "failed"
    assert by_prefix["logs/2026/10/11/"].try_number == 1  # the job allows a retry; not used
    assert by_prefix["logs/2026/10/10/"].state == by_prefix["logs/2026/10/12/"].state == "success"
    assert tis["report"].state == "failed"
    assert archived_day(af, date(2026, 10, 12))
    assert not keys_in(af.s3, af.dst, f"archive/{af.src}/logs/2026/10/11")
    rows = xcom_rows(run, "archive", "archive_rows", map_index=1)
    assert rows[0]["status"] == "failed" and "holds no objects" in rows[0]["error"]
    assert rows[0]["retryable"] is False


@pytest.mark.parametrize("conf, message", [
    ({"date_from": "2026-10-20", "date_to": "2026-10-19"}, "empty date range"),
    ({"date_from": "2026-10-20"}, "date_from and date_to go together"),
    ({"prefixes": ["logs/2026/10/2/"]}, "is not one that job 'logs' archives"),
    ({"date_from": "2026-10-20", "date_to": "2099-01-01"}, "too recent"),
])
def test_bad_params_are_rejected_before_any_work(af, conf, message, capfd):
    run, tis = run_dag(af, conf=conf)
    out, err = capfd.readouterr()
    assert run.state == "failed"
    assert tis["plan"].state == "failed" and tis["plan"].try_number == 1
    assert "archive" not in {k if isinstance(k, str) else k[0] for k in tis} or \
        all(ti.state == "upstream_failed" for k, ti in tis.items() if not isinstance(k, str))
    assert f"bad parameters, nothing was started: {message}" in out + err or \
        (message in out + err and "bad parameters, nothing was started" in out + err)


def test_malformed_date_is_rejected_by_the_trigger_form_schema(af):
    from airflow.sdk.definitions.param import ParamValidationError

    with pytest.raises(ParamValidationError, match="date_from"):
        run_dag(af, conf={"date_from": "2026-13-01", "date_to": "2026-13-02"})


@pytest.mark.slow  # a whole DagRun through dag.test(), every task archiving: end to end
def test_on_call_rerun_of_one_prefix_touches_nothing_else(af):
    days = [date(2026, 10, 14), date(2026, 10, 15)]
    seed(af, *days)
    run_dag(af, conf={"date_from": "2026-10-14", "date_to": "2026-10-15"})
    before = [manifest_modified(af, d) for d in days]
    time.sleep(1.1)  # LastModified has one-second resolution: a rewrite in the same second would look untouched
    run, _ = run_dag(af, conf={"prefixes": ["logs/2026/10/15/"], "overwrite": True})
    assert run.state == "success"
    assert [r["status"] for r in xcom_rows(run)] == ["archived"]
    assert manifest_modified(af, days[0]) == before[0]
    assert manifest_modified(af, days[1]) > before[1]
    stem = f"archive/{af.src}/logs/2026/10/15"
    assert keys_in(af.s3, af.dst, stem) == [f"{stem}.manifest-index.json.gz", f"{stem}.manifest.jsonl.gz",
                                            f"{stem}.tar.gz"]


@pytest.mark.slow  # a whole DagRun through dag.test(), every task archiving: end to end
def test_range_longer_than_max_map_length_is_batched_into_fewer_tasks(af, monkeypatch):
    monkeypatch.setenv("AIRFLOW__CORE__MAX_MAP_LENGTH", "2")
    days = [date(2026, 10, 17) + timedelta(days=i) for i in range(5)]
    seed(af, *days)
    run, tis = run_dag(af, conf={"date_from": "2026-10-17", "date_to": "2026-10-21"})
    assert run.state == "success"
    names = sorted(ti.rendered_map_index for key, ti in tis.items() if key[0] == "archive")
    assert names == ["logs/2026/10/17/ .. logs/2026/10/19/ (3 prefixes)",
                     "logs/2026/10/20/ .. logs/2026/10/21/ (2 prefixes)"]
    assert [r["prefix"] for r in xcom_rows(run)] == [f"{d:logs/%Y/%m/%d}/" for d in days]
    for day in days:
        assert archived_day(af, day)


def test_missing_connection_fails_permanently_instead_of_using_other_credentials(af):
    from s3arch_airflow.compat import AirflowFailException
    from s3arch_airflow import S3ArchivePrefixOperator

    operator = S3ArchivePrefixOperator(task_id="archive_nowhere", source_bucket=af.src, prefix="logs/",
                                       destination=f"s3://{af.dst}/archive/", aws_conn_id="no_such_conn")
    ti = TaskInstanceStub()
    with pytest.raises(AirflowFailException, match="permanently"):
        operator.execute({"ti": ti})
    row = ti.pushed["archive_rows"][0]
    assert "connection 'no_such_conn' does not exist" in row["error"] and row["retryable"] is False


def test_timed_out_try_leaves_no_upload_and_the_next_try_archives(af, capfd, monkeypatch):
    """Airflow's execution_timeout raises AirflowTaskTimeout from SIGALRM in the middle of
    the engine; the try must abort its uploads, and the next try must start over cleanly."""
    import os
    import signal

    try:
        from airflow.sdk.exceptions import AirflowTaskTimeout
    except ImportError:  # Airflow 3.1 (make compat): not in the Task SDK yet
        from airflow.exceptions import AirflowTaskTimeout  # type: ignore[no-redef]
    from airflow.sdk.execution_time.timeout import timeout
    from s3arch_airflow import S3ArchivePrefixOperator

    from helpers import open_uploads, seed as put_objects

    prefix = "big/2026/10/25/"
    objects = {f"{prefix}blob-{i:03d}.bin": os.urandom(1 << 20) for i in range(160)}
    put_objects(af.s3, af.src, objects)
    operator = S3ArchivePrefixOperator(task_id="archive_big", source_bucket=af.src, prefix=prefix,
                                       destination=f"s3://{af.dst}/archive/",
                                       options={"storage_class": "STANDARD", "memory_budget": "48MiB"},
                                       aws_conn_id="s3_archive", progress_interval=0.25)

    # Airflow's own timeout (SIGALRM), brought forward to fire once 40 of the 160 objects are
    # in the tar stream, so the try is always interrupted mid-upload, never before or after.
    from s3arch.format.tarwriter import TarStream

    begin, started = TarStream.begin, []

    def begin_and_count(self, *args):
        started.append(1)
        if len(started) == 40:
            signal.setitimer(signal.ITIMER_REAL, 0.01)
        return begin(self, *args)

    monkeypatch.setattr(TarStream, "begin", begin_and_count)
    ti = TaskInstanceStub()
    with pytest.raises(AirflowTaskTimeout):
        with timeout(600):
            operator.execute({"ti": ti})
    assert 40 <= len(started) < 160
    monkeypatch.undo()
    assert open_uploads(af.s3, af.dst) == []
    assert not keys_in(af.s3, af.dst, f"archive/{af.src}/big/")

    rows = operator.execute({"ti": ti})
    assert rows[0]["status"] == "archived" and rows[0]["objects"] == 160
    out, err = capfd.readouterr()
    assert re.search(r"big/2026/10/25/: [\d,]+/160 objects, .* MiB in -> .* obj/s", out + err), \
        "no progress line (objects, bytes, rate) in the task log"
    assert read_archive(af.s3, af.dst, f"archive/{af.src}/big/2026/10/25.tar.gz") == objects


def test_denied_source_delete_fails_the_task_and_its_retry_never_reports_success(af, minio, monkeypatch):
    """A bucket policy denies DeleteObject on the source: the archive commits, the deletion
    fails the task permanently, and running the task again (a retry or a clear) fails the same
    way instead of finding the manifest and reporting success."""
    from s3arch_airflow.compat import AirflowFailException
    from s3arch_airflow import S3ArchivePrefixOperator

    from helpers import minio_user

    day = date(2026, 9, 14)
    seed(af, day)
    user, secret = minio_user(minio, [
        {"Effect": "Allow", "Action": ["s3:*"], "Resource": ["arn:aws:s3:::*"]},
        {"Effect": "Deny", "Action": ["s3:DeleteObject"], "Resource": [f"arn:aws:s3:::{af.src}/*"]}])
    monkeypatch.setenv("AIRFLOW_CONN_S3_NO_DELETE", json.dumps({
        "conn_type": "aws", "login": user, "password": secret,
        "extra": {"endpoint_url": minio.endpoint_url, "region_name": minio.region}}))
    operator = S3ArchivePrefixOperator(task_id="archive_and_delete", source_bucket=af.src,
                                       prefix=f"{day:logs/%Y/%m/%d}/", destination=f"s3://{af.dst}/archive/",
                                       options={"storage_class": "STANDARD"}, delete_source=True,
                                       aws_conn_id="s3_no_delete")
    for attempt in ("first try", "retry"):
        ti = TaskInstanceStub()
        with pytest.raises(AirflowFailException, match="permanently"):
            operator.execute({"ti": ti})
        row = ti.pushed["archive_rows"][0]
        assert row["status"] == "failed" and "access denied" in row["error"], (attempt, row)
        assert "delete-sources" in row["error"] and row["retryable"] is False
    assert len(keys_in(af.s3, af.src, f"{day:logs/%Y/%m/%d}/")) == len(
        [k for k in af.seeded if k.startswith(f"{day:logs/%Y/%m/%d}/")])
    assert archived_day(af, day) == {k: v for k, v in af.seeded.items() if k.startswith(f"{day:logs/%Y/%m/%d}/")}


def test_trigger_forms_do_not_mark_optional_params_as_required(af):
    """The UI puts a red "required" star on every param whose schema does not allow null."""
    from helpers import dag_bag

    bag = dag_bag(str(ROOT / "dags"))
    always_filled = {"tier", "days"}  # restore: a default that is always valid
    for dag_id in (DAG_ID, "s3_restore__logs"):
        for name, param in bag.dags[dag_id].params.items():
            types = param.schema.get("type")
            types = types if isinstance(types, list) else [types]
            assert "null" in types or name in always_filled, f"{dag_id}: param {name!r} shows as required"
            if "null" in types:
                assert "(optional" in param.schema.get("title", "") or name.startswith("date_"), (dag_id, name)


def test_openlineage_sees_the_prefix_as_input_and_archive_and_manifest_as_outputs(af):
    """With the OpenLineage provider installed, its extractor manager finds the operator's facets."""
    from airflow.providers.openlineage.extractors.manager import ExtractorManager
    from s3arch_airflow import S3ArchivePrefixOperator

    operator = S3ArchivePrefixOperator(task_id="archive_lineage", source_bucket=af.src, prefix="logs/2026/10/06/",
                                       destination=f"s3://{af.dst}/archive/", aws_conn_id="s3_archive")
    from types import SimpleNamespace

    lineage = ExtractorManager().extract_metadata(dagrun=SimpleNamespace(run_id="manual__lineage"), task=operator,
                                                  task_instance_state="success", task_instance=None)
    assert [(d.namespace, d.name) for d in lineage.inputs] == [(f"s3://{af.src}", "logs/2026/10/06/")]
    assert [(d.namespace, d.name) for d in lineage.outputs] == [
        (f"s3://{af.dst}", f"archive/{af.src}/logs/2026/10/06.tar.gz"),
        (f"s3://{af.dst}", f"archive/{af.src}/logs/2026/10/06.manifest.jsonl.gz")]


def test_a_task_process_whose_supervisor_dies_cancels_itself(tmp_path):
    """An orphaned task process (its Celery worker SIGKILLed) sets its cancel within about a
    second, with the reason its run then reads; one whose supervisor lives never does."""
    import subprocess
    import sys
    import textwrap

    child = textwrap.dedent("""
        import logging, sys
        sys.path.insert(0, sys.argv[1])
        from s3arch.core.stops import Cancel
        from s3arch_airflow.task_stops import cancel_if_orphaned
        cancel = Cancel()
        cancel_if_orphaned(cancel, logging.getLogger("t"), interval=0.1)
        print("watching", flush=True)
        outcome = cancel.reason if cancel.wait(float(sys.argv[3])) else "not cancelled"
        open(sys.argv[2], "w").write(outcome)
    """)
    parent = textwrap.dedent("""
        import os, subprocess, sys
        child = subprocess.Popen([sys.executable, "-c", *sys.argv[1:]], stdout=subprocess.PIPE, text=True)
        assert child.stdout.readline() == "watching\\n"
        if sys.argv[-1] == "4":
            os._exit(0)  # the supervisor dies; the task process lives on
        child.wait()
    """)
    from s3arch_airflow.task_stops import ORPHANED

    for wait, expected in (("4", ORPHANED), ("3", "not cancelled")):
        outcome = tmp_path / f"outcome-{wait}"
        subprocess.run([sys.executable, "-c", parent, child, str(ROOT / "plugins"), str(outcome), wait],
                       check=True, timeout=60)
        deadline = time.monotonic() + 30
        while not outcome.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert outcome.read_text() == expected


def test_dry_run_of_a_deleting_job_deletes_nothing_and_is_accepted_by_job_and_operator(af):
    """A job that deletes sources (and their versions) previews without deleting, from the
    jobs file and from the operator alike: the one rule is ArchiveSpec.previewed."""
    from s3arch_airflow.operators import S3ArchivePrefixOperator

    from s3arch.ops.jobs import job_from_dict

    deleting = job_from_dict("logs", {"source": "s3://app-logs/", "prefix_template": "logs/{date:%Y/%m/%d}/",
                                      "destination": "s3://vault/archive/", "delete_source": True,
                                      "delete_versions": True})
    spec = deleting.spec_for("logs/2026/11/01/", dry_run=True)
    assert (spec.dry_run, spec.delete_source, spec.delete_versions) == (True, False, False)
    real = deleting.spec_for("logs/2026/11/01/")
    assert (real.dry_run, real.delete_source, real.delete_versions) == (False, True, True)
    operator = S3ArchivePrefixOperator(task_id="archive", source_bucket="app-logs", prefix="logs/2026/11/01/",
                                       destination="s3://vault/archive/", delete_source=True,
                                       delete_versions=True, options={**deleting.operator_args, "dry_run": "True"})
    assert operator._spec("logs/2026/11/01/", delete_source=True, delete_versions=True) == spec
    # Round 3's spelling still works for a release, with a warning naming the new one.
    with pytest.warns(FutureWarning, match=r"preview=\.\.\.\) is deprecated.*use dry_run"):
        old = S3ArchivePrefixOperator(task_id="archive_old", source_bucket="app-logs", prefix="logs/2026/11/01/",
                                      destination="s3://vault/archive/", preview="True",
                                      options=deleting.operator_args)
    assert old._spec("logs/2026/11/01/", delete_source=True, delete_versions=True) == spec


def test_the_operator_takes_every_job_setting_by_its_name_and_builds_the_jobs_spec():
    """One name per setting: the operator built from a job's settings runs exactly the spec
    the job describes (processes 1 by default: one task, one process)."""
    from s3arch_airflow.operators import S3ArchivePrefixOperator

    from s3arch.ops.jobs import job_from_dict

    job = job_from_dict("logs", {"source": "s3://app-logs/", "prefix_template": "logs/{date:%Y/%m/%d}/",
                                 "destination": "s3://vault/archive/", "concurrency": 16, "threads": 3,
                                 "lease_ttl": 30, "sse": "aws:kms", "sse_kms_key_id": "k", "sse_bucket_key": True,
                                 "object_lock": "GOVERNANCE", "retain_days": 2, "legal_hold": True,
                                 "expected_owner": 123456789012, "without_tags": True,
                                 "segment_min_objects": 10, "segment_min_bytes": "1MiB", "processes": 2})
    operator = S3ArchivePrefixOperator(task_id="archive", source_bucket="app-logs", prefix="logs/2026/11/01/",
                                       destination="s3://vault/archive/", options=job.operator_args)
    spec = operator._spec("logs/2026/11/01/")
    assert spec == job.spec_for("logs/2026/11/01/")
    assert (spec.concurrency, spec.compress_threads, spec.lease_ttl, spec.processes) == (16, 3, 30, 2)
    default = S3ArchivePrefixOperator(task_id="d", source_bucket="app-logs", prefix="p/", destination="s3://vault/a/")
    assert default._spec("p/").processes == 1 and default._spec("p/").concurrency == 128


def test_a_bug_in_an_archive_task_fails_it_without_spending_retries(af, monkeypatch):
    """A KeyError from our own code is not weather: Airflow must not retry it, and the row
    pushed for the report says so."""
    from s3arch_airflow.compat import AirflowFailException

    import s3arch_airflow.operators as operators
    from s3arch_airflow.task_rows import ROWS_XCOM_KEY
    import s3arch.archive

    def broken(*args, **kwargs):
        return {}["no such key"]

    from s3arch_airflow.hooks import S3ArchHook

    monkeypatch.setattr(S3ArchHook, "engine_clients", lambda hook: object())
    monkeypatch.setattr(s3arch.archive, "archive_prefix", broken)
    pushed = {}

    class TaskInstance:
        def xcom_push(self, key, value):
            pushed[key] = value

    operator = operators.S3ArchivePrefixOperator(task_id="archive", source_bucket="app-logs",
                                                 prefix="logs/2026/11/01/", destination="s3://vault/archive/")
    with pytest.raises(AirflowFailException, match="a bug, not retried: KeyError") as raised:
        operator.execute({"ti": TaskInstance()})
    assert isinstance(raised.value.__cause__, KeyError)
    assert [(r["status"], r["retryable"]) for r in pushed[ROWS_XCOM_KEY]] == [("failed", False)]


def test_operator_commits_under_the_jobs_object_lock_and_the_report_shows_it(af, minio):
    """The job's Object Lock settings reach the engine through the operator's parameters;
    the row carries the retention and the report prints it."""
    import uuid

    from s3arch_airflow import S3ArchivePrefixOperator
    from s3arch_airflow.report import LOCK_COLUMNS, COLUMNS, format_table

    from s3arch.ops.jobs import job_from_dict

    day = date(2026, 9, 15)
    seed(af, day)
    locked = f"locked-{uuid.uuid4().hex[:8]}"
    af.s3.create_bucket(Bucket=locked, ObjectLockEnabledForBucket=True)
    job = job_from_dict("locked", {"source": f"s3://{af.src}/", "prefix_template": TEMPLATE,
                                   "destination": f"s3://{locked}/archive/", "object_lock": "COMPLIANCE",
                                   "retain_days": 1, "storage_class": "STANDARD"})
    operator = S3ArchivePrefixOperator(task_id="archive_locked", source_bucket=af.src, prefix=f"{day:logs/%Y/%m/%d}/",
                                       destination=str(job.destination), aws_conn_id="s3_archive",
                                       options={"storage_class": "STANDARD", "object_lock": "COMPLIANCE",
                                                "retain_days": 1})
    assert operator._spec("x/").write_options.lock_args().keys() == job.spec_for("x/").write_options.lock_args().keys()
    with pytest.warns(FutureWarning, match="spec_options"):  # round 3's spelling, for a release
        assert S3ArchivePrefixOperator(task_id="old", source_bucket=af.src, prefix="x/", destination="s3://a-b/",
                                       spec_options=job.spec_options).options["object_lock"] == "COMPLIANCE"
    ti = TaskInstanceStub()
    operator.execute({"ti": ti})
    row = ti.pushed["archive_rows"][0]
    assert row["status"] == "archived" and row["retention"]["mode"] == "COMPLIANCE"
    head = af.s3.head_object(Bucket=locked, Key=f"archive/{af.src}/{day:logs/%Y/%m/%d}.tar.gz")
    assert head["ObjectLockMode"] == "COMPLIANCE"
    assert f"COMPLIANCE until {row['retention']['retain_until'][:10]}" in format_table([row], COLUMNS + LOCK_COLUMNS)

"""End to end with real Airflow processes: the api-server, scheduler and dag-processor on
SQLite with the LocalExecutor, started by the test and stopped by PID, driven through the
REST API the way the UI and on-call scripts drive it, with MinIO as the S3."""

from __future__ import annotations

import json
import os
import re
import socket
import threading
import time
from datetime import date, timedelta
from pathlib import Path

import pytest
import yaml

from devtools.airflow_local import write_jobs_file
from devtools.sample_data import seed_day
from devtools.servers import ServerStartError
from faultproxy import Fault, FaultProxy, is_upload_part, wait_until
from helpers import LOG_TEMPLATE as TEMPLATE, airflow_with_log_job, keys_in, open_uploads, read_archive, seed


pytestmark = pytest.mark.slow  # real Airflow processes (api-server, scheduler, dag-processor, triggerer)


DAG_ID = "s3_archive__e2e"
MIN_AGE = 2


@pytest.fixture(scope="module")
def stack(airflow_e2e_stack):
    """The suite's one Airflow stack (tests/conftest.py: started once, shared with
    test_airflow_e2e_docs.py, stopped after the last test that uses it)."""
    return airflow_e2e_stack


def shared_stack(minio, tmp_path_factory):
    """The stack behind ``airflow_e2e_stack``: yields (airflow, s3, src, dst); ``airflow.shutdown()``
    stops it (idempotent; also at the end)."""
    airflow, s3, src, dst = airflow_with_log_job(minio, tmp_path_factory.mktemp("airflow-e2e"), "e2e",
                                                 min_age_days=MIN_AGE, retry_delay_seconds=2)
    # A second job reaches MinIO through a fault proxy, so a test can hold its uploads.
    proxy = FaultProxy(minio.endpoint_url, max_lifetime=1800)
    jobs_file = Path(airflow.env["S3ARCH_JOBS_FILE"])
    jobs = yaml.safe_load(jobs_file.read_text())["jobs"]
    write_jobs_file(jobs_file, {**jobs, "e2e_slow": {**jobs["e2e"], "aws_conn_id": "s3_slow", "retries": 0},
                                "e2e_seg": {**jobs["e2e"], "segments": 2,
                                            "segment_min_objects": 100, "memory_budget": "256MiB"}})
    airflow.env["AIRFLOW_CONN_S3_SLOW"] = json.dumps({
        "conn_type": "aws", "login": minio.access_key, "password": minio.secret_key,
        "extra": {"endpoint_url": proxy.endpoint_url, "region_name": minio.region}})
    airflow.proxy = proxy
    # Airflow's own metrics go to a StatsD listener in this test, over UDP on loopback; a thread
    # drains it all the time (the scheduler alone would fill a socket buffer in a minute).
    airflow.statsd = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    airflow.statsd.bind(("127.0.0.1", 0))
    airflow.statsd.settimeout(0.5)
    airflow.metrics = []
    threading.Thread(target=_collect_s3arch_metrics, args=(airflow,), daemon=True).start()
    airflow.env.update({"AIRFLOW__METRICS__STATSD_ON": "True", "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
                        "AIRFLOW__METRICS__STATSD_PORT": str(airflow.statsd.getsockname()[1])})
    try:
        airflow.start()
    except ServerStartError as exc:
        pytest.fail(f"Airflow could not start, so the end-to-end test cannot run: {exc}", pytrace=False)

    stopped = []

    def shutdown():
        if stopped:
            return
        stopped.append(True)
        airflow.stop()
        proxy.stop()
        airflow.statsd.close()
        assert not airflow.processes

    airflow.shutdown = shutdown
    try:
        wait_for(lambda: _dag_parsed(airflow), 120, "the dag-processor to parse the archive DAG", airflow)
        yield airflow, s3, src, dst
    finally:
        shutdown()


def _dag_parsed(airflow, dag_id=DAG_ID) -> bool:
    try:
        return airflow.api("GET", f"dags/{dag_id}")["dag_id"] == dag_id
    except RuntimeError:
        return False


def wait_for(condition, timeout, what, airflow):
    return airflow.wait_until(condition, timeout, what, interval=1)


def _trigger(airflow, dag_id, conf):
    """POST a run; None on SQLite's "database is locked" while the dag-processor writes, so
    the caller can try again."""
    return _unless_locked(airflow, "POST", f"dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf})


def _unless_locked(airflow, method, path, body):
    """The API call, or None when SQLite was locked by another writer (HTTP 500, or 503 for a
    backfill): SQLite's limit, not the product's; the caller tries again."""
    try:
        return airflow.api(method, path, body)
    except RuntimeError as exc:
        if "HTTP 500" in str(exc) or ("HTTP 503" in str(exc) and "Database is locked" in str(exc)):
            return None
        raise


def run_state(airflow, run_id, dag_id=DAG_ID):
    return airflow.api("GET", f"dags/{dag_id}/dagRuns/{run_id}")["state"]


def wait_run(airflow, run_id, timeout=240, dag_id=DAG_ID) -> str:
    return wait_for(lambda: (s := run_state(airflow, run_id, dag_id)) in ("success", "failed") and s,
                    timeout, f"run {run_id} to finish", airflow)


def _collect_s3arch_metrics(airflow) -> None:
    while True:
        try:
            packet = airflow.statsd.recv(65536)
        except socket.timeout:
            continue
        except OSError:
            return  # closed at the end of the module
        airflow.metrics += [line for line in packet.decode().splitlines() if "s3arch" in line]


def received_metrics(airflow, complete) -> list[str]:
    """The s3arch metrics received once ``complete(metrics)`` holds (the last task's packets
    may be in flight when its run ends), or after 30 s."""
    wait_until(lambda: complete(list(airflow.metrics)), 30)
    return list(airflow.metrics)


def objects_reported(metrics: list[str]) -> int:
    return sum(int(line.split(":")[1].split("|")[0]) for line in metrics if line.startswith("airflow.s3arch.objects:"))


def archive_state(s3, src, dst, day):
    """(archive keys for the day, members of its archive or None)."""
    keys = keys_in(s3, dst, f"archive/{src}/{day:logs/%Y/%m/%d}.")
    archive = f"archive/{src}/{day:logs/%Y/%m/%d}.tar.gz"
    return keys, (read_archive(s3, dst, archive) if archive in keys else None)


def assert_archived_once(s3, src, dst, day, seeded):
    keys, members = archive_state(s3, src, dst, day)
    stem = f"archive/{src}/{day:logs/%Y/%m/%d}"
    # One archive and its manifest; a re-run that re-checked the day for late objects also
    # leaves its day index (docs/FORMAT.md, "Parts"), and no second part.
    assert [k for k in keys if k != f"{stem}.parts.json"] == [
        f"{stem}.manifest-index.json.gz", f"{stem}.manifest.jsonl.gz", f"{stem}.tar.gz"], keys
    assert members == {k: v for k, v in seeded.items() if k.startswith(f"{day:logs/%Y/%m/%d}/")}


def test_trigger_backfill_and_on_call_clear_through_the_rest_api(stack):
    airflow, s3, src, dst = stack
    seeded = {}

    def seed(*days):
        for day in days:
            seeded.update(seed_day(s3, src, TEMPLATE, day, files_per_hour=2, lines_per_file=20))

    # 1. On-call triggers a date range with conf; one day's data has not landed yet.
    seed(date(2026, 9, 1), date(2026, 9, 3))
    run = wait_for(lambda: _trigger(airflow, DAG_ID, {"date_from": "2026-09-01", "date_to": "2026-09-03"}), 60,
                   "the API to accept the trigger", airflow)
    assert wait_run(airflow, run["dag_run_id"]) == "failed"
    tis = airflow.api("GET", f"dags/{DAG_ID}/dagRuns/{run['dag_run_id']}/taskInstances")["task_instances"]
    mapped = {ti["rendered_map_index"]: ti for ti in tis if ti["task_id"] == "archive"}
    assert sorted(mapped) == ["logs/2026/09/01/", "logs/2026/09/02/", "logs/2026/09/03/"]
    assert mapped["logs/2026/09/02/"]["state"] == "failed"
    assert mapped["logs/2026/09/02/"]["try_number"] == 1  # permanent: retries not burned
    assert archive_state(s3, src, dst, date(2026, 9, 2)) == ([], None)

    # 2. The data lands; on-call clears exactly that mapped task (and the report after it).
    seed(date(2026, 9, 2))
    done_before = {d: s3.head_object(Bucket=dst, Key=f"archive/{src}/{d:logs/%Y/%m/%d}.tar.gz")["LastModified"]
                   for d in (date(2026, 9, 1), date(2026, 9, 3))}
    cleared = airflow.api("POST", f"dags/{DAG_ID}/clearTaskInstances", {
        "dry_run": False, "dag_run_id": run["dag_run_id"],
        "task_ids": [["archive", mapped["logs/2026/09/02/"]["map_index"]]],
        "include_downstream": True, "only_failed": False, "reset_dag_runs": True})
    assert {(ti["task_id"], ti["map_index"]) for ti in cleared["task_instances"]} == {
        ("archive", mapped["logs/2026/09/02/"]["map_index"]), ("report", -1)}
    wait_for(lambda: run_state(airflow, run["dag_run_id"]) in ("queued", "running"), 30,
             "the cleared run to restart", airflow)
    assert wait_run(airflow, run["dag_run_id"]) == "success"
    for day in (date(2026, 9, 1), date(2026, 9, 2), date(2026, 9, 3)):
        assert_archived_once(s3, src, dst, day, seeded)
    assert {d: s3.head_object(Bucket=dst, Key=f"archive/{src}/{d:logs/%Y/%m/%d}.tar.gz")["LastModified"]
            for d in done_before} == done_before  # the others were not touched

    # 3. A backfill over logical dates archives each date minus the job's age, one run each.
    logical = [date(2026, 9, 10) + timedelta(days=i) for i in range(3)]
    seed(*(d - timedelta(days=MIN_AGE) for d in logical))
    backfill = wait_for(lambda: _unless_locked(airflow, "POST", "backfills", {
        "dag_id": DAG_ID, "from_date": f"{logical[0]}T00:00:00Z", "to_date": f"{logical[-1]}T00:00:00Z",
        "run_backwards": False, "dag_run_conf": {}, "reprocess_behavior": "none", "max_active_runs": 2}),
        60, "the API to accept the backfill", airflow)

    def backfill_runs():
        runs = airflow.api("GET", f"dags/{DAG_ID}/dagRuns?run_type=backfill&limit=50")["dag_runs"]
        runs = [r for r in runs if r.get("backfill_id") in (None, backfill["id"])]
        return runs if len(runs) == 3 and all(r["state"] in ("success", "failed") for r in runs) else None

    runs = wait_for(backfill_runs, 300, "the backfill's three runs", airflow)
    assert sorted(r["state"] for r in runs) == ["success"] * 3
    for day in logical:
        assert_archived_once(s3, src, dst, day - timedelta(days=MIN_AGE), seeded)

    assert open_uploads(s3, dst) == []

    # 4. Every archived prefix reported its figures through Airflow's metrics (StatsD here).
    metrics = received_metrics(airflow, lambda received: objects_reported(received) == len(seeded) and any(
        line.startswith("airflow.s3arch.failures:") for line in received))
    assert objects_reported(metrics) == len(seeded), metrics
    assert any(line.startswith("airflow.s3arch.seconds:") and "|ms" in line for line in metrics)
    assert any(line.startswith("airflow.s3arch.failures:") for line in metrics)  # the day that had no data


def test_task_marked_failed_through_the_rest_api_cancels_cleanly(stack, reliability):
    """On call marks a running archive task failed (as the UI's "Mark as failed" does): Airflow
    SIGTERMs the task, on_kill cancels the engine, the uploads are aborted and nothing is
    committed, long before the held upload would have ended."""
    airflow, s3, src, dst = stack
    dag_id, day = "s3_archive__e2e_slow", date(2026, 7, 1)
    seed(s3, src, {f"{day:logs/%Y/%m/%d}/blob-{i}.bin": os.urandom(3 << 20) for i in range(8)})
    held = []
    airflow.proxy.add(Fault("stall", seconds=300, match=is_upload_part, on_inject=held.append))
    wait_for(lambda: _dag_parsed(airflow, dag_id), 120, "the dag-processor to parse the slow DAG", airflow)
    run = wait_for(lambda: _trigger(airflow, dag_id, {"date_from": f"{day}", "date_to": f"{day}"}), 60,
                   "the API to accept the trigger", airflow)
    wait_for(lambda: held, 120, "the archive task to reach its first upload", airflow)
    started = time.monotonic()
    airflow.api("PATCH", f"dags/{dag_id}/dagRuns/{run['dag_run_id']}/taskInstances/archive/0",
                {"new_state": "failed"})
    stem = f"archive/{src}/{day:logs/%Y/%m/%d}."
    # The cancelled run aborts its uploads, then releases its lease: wait for both to be gone.
    wait_for(lambda: not open_uploads(s3, dst) and not keys_in(s3, dst, stem), 90,
             "the killed task to abort its uploads and release its lease", airflow)
    took = time.monotonic() - started
    assert took < 120, "the uploads went away only when the held request ended"
    assert not keys_in(s3, dst, stem)  # no archive, no manifest, no lease
    logs = "\n".join(p.read_text(errors="replace") for p in (airflow.home / "logs").rglob("*")
                     if p.is_file() and dag_id in str(p))
    assert "cancelling the archive" in logs
    airflow.proxy.clear()
    airflow.proxy.released.set()
    reliability.record("archive task marked failed through the REST API mid-upload", "1 task, uploads held",
                       f"on_kill cancelled the engine; uploads aborted {took:.0f} s after the kill, nothing committed")



def test_segment_tasks_of_one_day_on_the_local_executor_make_one_archive_and_the_report(stack):
    """A job with segments on the LocalExecutor, its tasks in a pool of 2 slots (at most two
    segment task processes at once): a large day is prepared, archived by two segment task
    processes, assembled once, and reported. (Whether the two overlap depends on what else
    holds the slots; the engine-level tests prove segments running at once.)"""
    airflow, s3, src, dst = stack
    dag_id, day = "s3_archive__e2e_seg", date(2026, 6, 1)
    seeded = seed_day(s3, src, TEMPLATE, day, files_per_hour=10, lines_per_file=200)  # 240 objects
    wait_for(lambda: _dag_parsed(airflow, dag_id), 120, "the dag-processor to parse the segments DAG", airflow)
    run = wait_for(lambda: _trigger(airflow, dag_id, {"date_from": f"{day}", "date_to": f"{day}"}), 60,
                   "the API to accept the trigger", airflow)
    assert wait_run(airflow, run["dag_run_id"], dag_id=dag_id) == "success"
    tis = airflow.api("GET", f"dags/{dag_id}/dagRuns/{run['dag_run_id']}/taskInstances")["task_instances"]
    segments = {ti["rendered_map_index"]: ti for ti in tis if ti["task_id"] == "segment"}
    prefix = f"{day:logs/%Y/%m/%d}/"
    assert sorted(segments) == [f"{prefix} [1/2]", f"{prefix} [2/2]"]
    assert all(ti["state"] == "success" for ti in segments.values())
    assert len({ti["pid"] for ti in segments.values()}) == 2  # each in its own task process
    assert [ti["state"] for ti in tis if ti["task_id"] == "assemble"] == ["success"]
    assert_archived_once(s3, src, dst, day, seeded)
    assert open_uploads(s3, dst) == []
    report = airflow.api("GET", f"dags/{dag_id}/dagRuns/{run['dag_run_id']}/taskInstances/report/xcomEntries/"
                                "return_value")["value"]
    rows = json.loads(report) if isinstance(report, str) else report
    assert [(r["prefix"], r["status"], r["segments"], r["objects"]) for r in rows] == [
        (prefix, "archived", 2, len(seeded))]


def test_no_credential_is_in_any_task_log_xcom_or_note_of_the_runs(stack, minio):
    """Runs last in this module: every run above (failed days, retries, a killed task,
    segments) left its task logs and XComs. None may hold the connection's secret key, its
    access key, or anything signed (a presigned query string or an Authorization header)."""
    import sqlite3

    airflow, _, _, _ = stack
    secrets = {"secret key": minio.secret_key, "access key": minio.access_key}
    signed = re.compile(r"X-Amz-Signature|X-Amz-Credential|AWSAccessKeyId=|Signature=|AWS4-HMAC-SHA256 Credential")
    task_logs = [p for p in (airflow.home / "logs").rglob("*") if p.is_file()]
    assert len(task_logs) >= 10, "the runs above left no task logs to scan"
    found = []
    for path in task_logs:
        text = path.read_text(errors="replace")
        found += [f"{name} in {path}" for name, value in secrets.items() if value in text]
        found += [f"signed request in {path}: {m.group(0)}" for m in [signed.search(text)] if m]
    with sqlite3.connect(airflow.home / "airflow.db") as db:
        xcoms = [(key, str(value)) for key, value in db.execute("SELECT key, value FROM xcom")]
        notes = [str(content) for (content,) in db.execute("SELECT content FROM task_instance_note")]
    assert len(xcoms) >= 10, "the runs above left no XComs to scan"
    for where, text in [(f"XCom {key}", value) for key, value in xcoms] + [("task note", n) for n in notes]:
        found += [f"{name} in {where}" for name, value in secrets.items() if value in text]
        found += [f"signed request in {where}" for m in [signed.search(text)] if m]
    assert found == []

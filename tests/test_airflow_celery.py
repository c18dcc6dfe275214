"""The production topology, end to end: Airflow on PostgreSQL with the CeleryExecutor on Redis
and two Celery workers with distinct hostnames (devtools/airflow_celery.py), all started by the
test on loopback and stopped by PID, driven through the REST API as an operator drives it.
One stack serves every test here; MinIO is reached through the fault proxy, so a test can hold
a task mid-run and kill the worker running it."""

from __future__ import annotations

import json
import time
from datetime import date, timedelta

import pytest

from devtools.airflow_celery import WORKERS, prepare_celery_airflow
from devtools.airflow_local import write_jobs_file
from devtools.sample_data import seed_day
from devtools.servers import ServerStartError
from faultproxy import Fault, FaultProxy, is_get, wait_until
from helpers import LOG_TEMPLATE as TEMPLATE, keys_in, open_uploads
from test_airflow_e2e import assert_archived_once, wait_for


pytestmark = pytest.mark.slow  # the Celery stack: PostgreSQL, Redis, two workers


DAG_ID, NIGHTLY = "s3_archive__cel", "s3_archive__nightly"
MIN_AGE = 2
HEARTBEAT_TIMEOUT = 20  # seconds before the scheduler fails the task of a dead worker
HOSTS = {f"s3arch-{name}": name for name in WORKERS}
TODAY = date.today()
# The nightly job starts yesterday: at midnight yesterday and today it was due (cron runs, whose
# logical date is their time), so the scheduler owes it two runs, archiving the day before each.
NIGHTLY_DAYS = 2


def day_prefix(day: date) -> str:
    return f"{day:logs/%Y/%m/%d}/"


@pytest.fixture(scope="module")
def celery_stack(minio, tmp_path_factory):
    import uuid

    home = tmp_path_factory.mktemp("airflow-celery")
    s3 = minio.client(max_pool_connections=32)
    suffix = uuid.uuid4().hex[:8]
    src, dst = f"cel-src-{suffix}", f"cel-dst-{suffix}"
    for bucket in (src, dst):
        s3.create_bucket(Bucket=bucket)
    proxy = FaultProxy(minio.endpoint_url, max_lifetime=3600)
    base = {"source": f"s3://{src}/", "prefix_template": TEMPLATE, "destination": f"s3://{dst}/archive/",
            "storage_class": "STANDARD", "aws_conn_id": "s3_cel", "retries": 2, "retry_delay_seconds": 2,
            "memory_budget": "128MiB", "lease_ttl_seconds": 20, "execution_timeout_minutes": 20}
    start = TODAY - timedelta(days=NIGHTLY_DAYS - 1)
    jobs = write_jobs_file(home / "jobs.yaml", {
        # Backfills and on-call runs: scheduled daily, but every scheduled day is empty.
        "cel": {**base, "min_age_days": MIN_AGE, "start_date": "2026-01-01", "allow_empty": True,
                "segments": 3, "segment_min_objects": 200},
        # The nightly job: catches up the runs the scheduler owes it since its start date.
        "nightly": {**base, "min_age_days": 1, "start_date": f"{start}", "catchup": True},
    })
    nightly = {}
    for day in _nightly_days():  # seeded before the scheduler sees the job
        nightly.update(seed_day(s3, src, TEMPLATE, day, files_per_hour=2, lines_per_file=10))
    try:
        airflow = prepare_celery_airflow(home, minio, jobs, pool_slots=4, overrides={
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": str(HEARTBEAT_TIMEOUT),
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "2"})
    except ServerStartError as exc:
        proxy.stop()
        pytest.fail(f"the Celery stack could not start, so its tests cannot run: {exc}", pytrace=False)
    airflow.env["AIRFLOW_CONN_S3_CEL"] = json.dumps({
        "conn_type": "aws", "login": minio.access_key, "password": minio.secret_key,
        "extra": {"endpoint_url": proxy.endpoint_url, "region_name": minio.region}})
    airflow.s3, airflow.src, airflow.dst, airflow.proxy, airflow.nightly = s3, src, dst, proxy, nightly
    try:
        try:
            airflow.start()
        except ServerStartError as exc:
            pytest.fail(f"Airflow on Celery could not start: {exc}", pytrace=False)
        for dag_id in (DAG_ID, NIGHTLY):
            wait_for(lambda d=dag_id: _parsed(airflow, d), 180, f"the dag-processor to parse {dag_id}", airflow)
        yield airflow
    finally:
        airflow.stop()
        proxy.stop()
        assert not airflow.processes


def _nightly_days() -> list[date]:
    return [TODAY - timedelta(days=NIGHTLY_DAYS - i) for i in range(NIGHTLY_DAYS)]


def _parsed(airflow, dag_id) -> bool:
    try:
        return airflow.api("GET", f"dags/{dag_id}")["dag_id"] == dag_id
    except RuntimeError:
        return False


def runs_of(airflow, dag_id, run_type=None) -> list[dict]:
    query = f"?run_type={run_type}&limit=100" if run_type else "?limit=100"
    return airflow.api("GET", f"dags/{dag_id}/dagRuns{query}")["dag_runs"]


def task_instances(airflow, run_id, dag_id=DAG_ID) -> list[dict]:
    return airflow.api("GET", f"dags/{dag_id}/dagRuns/{run_id}/taskInstances?limit=500")["task_instances"]


def trigger(airflow, conf, dag_id=DAG_ID) -> str:
    return airflow.api("POST", f"dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf})["dag_run_id"]


def wait_run(airflow, run_id, timeout=300, dag_id=DAG_ID) -> str:
    def ended():
        state = airflow.api("GET", f"dags/{dag_id}/dagRuns/{run_id}")["state"]
        return state if state in ("success", "failed") else None
    return wait_for(ended, timeout, f"run {run_id} to finish", airflow)


def report(airflow, run_id, dag_id=DAG_ID) -> dict[str, dict]:
    """The run's rows: the report task's, or the plan task's of a one-day run it archived and
    reported (its report task skipped)."""
    states = {ti["task_id"]: ti["state"] for ti in task_instances(airflow, run_id, dag_id)}
    entry = "plan/xcomEntries/archive_rows" if states.get("report") == "skipped" else "report/xcomEntries/return_value"
    value = airflow.api("GET", f"dags/{dag_id}/dagRuns/{run_id}/taskInstances/{entry}")
    rows = json.loads(value["value"]) if isinstance(value["value"], str) else value["value"]
    return {row["prefix"]: row for row in rows}


def tries(airflow, run_id, task_id, map_index) -> list[dict]:
    path = f"dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/{task_id}/{map_index}/tries"
    return airflow.api("GET", path)["task_instances"]


def assert_clean(airflow) -> None:
    """No open upload, no segment temporary and no lease left in the destination."""
    assert open_uploads(airflow.s3, airflow.dst) == []
    assert [k for k in keys_in(airflow.s3, airflow.dst) if ".segments/" in k or k.endswith(".lease.json")] == []


def stall_gets_of(airflow, day: date, count: int, seconds: float) -> Fault:
    """Hold back the first ``count`` GETs of the day's objects, so its task is caught mid-run."""
    wanted = f"{airflow.src}/{day_prefix(day)}"
    fault = Fault("stall", seconds=seconds, count=count, match=lambda r: is_get(r) and r.key.startswith(wanted))
    airflow.proxy.add(fault)
    return fault


def kill_worker_running(airflow, run_id, task_id, stalled: Fault, host_lost=False, busy=None) -> tuple[str, dict, float]:
    """Wait until a ``task_id`` instance of the run is running, ``stalled`` holds one of its
    GETs (and ``busy()`` says it is at work, if given), SIGKILL the process group of the worker
    it runs on (``host_lost``: and its task processes); (worker, that task instance, when)."""
    def running():
        return next((ti for ti in task_instances(airflow, run_id)
                     if ti["task_id"] == task_id and ti["state"] == "running" and ti["hostname"] in HOSTS), None)
    ti = wait_for(running, 180, f"a {task_id} task to run", airflow)
    assert wait_until(lambda: stalled.injected, 120), "no GET of the task was held"
    if busy:
        wait_for(busy, 60, f"the {task_id} task to be at work", airflow)
    worker = HOSTS[ti["hostname"]]
    airflow.kill_worker(worker, host_lost=host_lost)
    return worker, ti, time.monotonic()


def green_again(airflow, run_id, worker, killed_at: float) -> float:
    """Seconds from the kill until the run ended green; the killed worker is started again
    for the tests after this one."""
    try:
        assert wait_run(airflow, run_id, timeout=420) == "success"
        return time.monotonic() - killed_at
    finally:
        airflow.start_worker(worker)


def test_backfill_spreads_a_large_days_segments_over_both_workers(celery_stack):
    airflow = celery_stack
    logical = [date(2026, 5, 10) + timedelta(days=i) for i in range(3)]
    days = [d - timedelta(days=MIN_AGE) for d in logical]
    seeded = {}
    seeded.update(seed_day(airflow.s3, airflow.src, TEMPLATE, days[0], files_per_hour=20, lines_per_file=20))  # 480
    for day in days[1:]:
        seeded.update(seed_day(airflow.s3, airflow.src, TEMPLATE, day, files_per_hour=2, lines_per_file=20))
    # Every GET of the large day is held 4 s, so each segment task lasts at least that long and
    # the three overlap: a worker reserves at most two (concurrency 2, prefetch 1), so one must
    # run on the other worker. Holding only the day's first three GETs let a quiet machine
    # finish each segment in about a second, and one worker ran all three in turn.
    stall_gets_of(airflow, days[0], count=480, seconds=4)

    backfill = airflow.api("POST", "backfills", {
        "dag_id": DAG_ID, "from_date": f"{logical[0]}T00:00:00Z", "to_date": f"{logical[-1]}T00:00:00Z",
        "run_backwards": False, "dag_run_conf": {}, "reprocess_behavior": "none", "max_active_runs": 3})

    assert backfill["dag_id"] == DAG_ID

    def ended():
        runs = [r for r in runs_of(airflow, DAG_ID, "backfill") if r["logical_date"][:10] in map(str, logical)]
        return runs if len(runs) == 3 and all(r["state"] in ("success", "failed") for r in runs) else None

    runs = wait_for(ended, 420, "the backfill's three runs", airflow)
    assert sorted(r["state"] for r in runs) == ["success"] * 3
    for day in days:
        assert_archived_once(airflow.s3, airflow.src, airflow.dst, day, seeded)
    assert_clean(airflow)

    large_run = next(r for r in runs if r["logical_date"].startswith(f"{logical[0]}"))
    tis = task_instances(airflow, large_run["dag_run_id"])
    segments = [ti for ti in tis if ti["task_id"] == "segment"]
    assert sorted(ti["rendered_map_index"] for ti in segments) == [f"{day_prefix(days[0])} [{k}/3]" for k in (1, 2, 3)]
    hosts = {ti["hostname"] for ti in segments}
    assert hosts == set(HOSTS), f"segment tasks ran on {hosts}"
    spans = sorted((ti["start_date"], ti["end_date"], ti["hostname"]) for ti in segments)
    assert any(a[1] > b[0] and a[2] != b[2] for i, a in enumerate(spans) for b in spans[i + 1:]), \
        f"no two segment tasks on different workers overlapped: {spans}"
    row = report(airflow, large_run["dag_run_id"])[day_prefix(days[0])]
    assert (row["status"], row["segments"], row["objects"]) == ("archived", 3, 480)
    print(f"\n[celery] segment hosts {sorted(hosts)}; spans {spans}")


def test_worker_killed_mid_segment_its_segment_runs_again_on_the_other_worker(celery_stack):
    """The worker's process group is SIGKILLed; its segment task process, orphaned, cancels
    itself (it would otherwise write temporaries after the commit), and Airflow's retry on the
    other worker produces the segment."""
    airflow = celery_stack
    day = date(2026, 5, 20)
    seeded = seed_day(airflow.s3, airflow.src, TEMPLATE, day, files_per_hour=12, lines_per_file=20)  # 288: segmented
    # Every object's first GET is held 12 s, so a running segment is surely mid-production when
    # its worker dies; the retry's GETs go through at once.
    stalled = stall_gets_of(airflow, day, count=len(seeded), seconds=12)
    run_id = trigger(airflow, {"date_from": f"{day}", "date_to": f"{day}"})
    worker, killed, when = kill_worker_running(airflow, run_id, "segment", stalled)
    recovered = green_again(airflow, run_id, worker, when)
    attempts = tries(airflow, run_id, "segment", killed["map_index"])
    assert [t["try_number"] for t in attempts][-1] >= 2
    assert attempts[-1]["state"] == "success"
    other = next(h for h, w in HOSTS.items() if w != worker)
    assert attempts[-1]["hostname"] == other, attempts
    assert_archived_once(airflow.s3, airflow.src, airflow.dst, day, seeded)
    assert_clean(airflow)
    print(f"\n[celery] killed {worker} mid-segment; the run was green {recovered:.0f}s later, "
          f"segment retried on {other}")


def test_worker_lost_mid_archive_the_retry_on_the_other_worker_commits_once(celery_stack):
    """The worker and its task processes die as with a lost host: the task's lease is left
    behind; the retry takes the prefix over (its holder is provably gone) and commits once."""
    airflow = celery_stack
    day = date(2026, 5, 25)
    seeded = seed_day(airflow.s3, airflow.src, TEMPLATE, day, files_per_hour=2, lines_per_file=20)  # 48: one task
    stalled = stall_gets_of(airflow, day, count=2, seconds=30)
    run_id = trigger(airflow, {"date_from": f"{day}", "date_to": f"{day}"})
    lease = f"archive/{airflow.src}/{day:logs/%Y/%m/%d}.lease.json"
    # Killed once it holds the prefix's lease (a loaded machine may take seconds to get there).
    worker, killed, when = kill_worker_running(airflow, run_id, "archive", stalled, host_lost=True,
                                               busy=lambda: lease in keys_in(airflow.s3, airflow.dst))
    assert lease in keys_in(airflow.s3, airflow.dst)  # the dead worker's lease is left behind
    recovered = green_again(airflow, run_id, worker, when)
    attempts = tries(airflow, run_id, "archive", killed["map_index"])
    assert attempts[-1]["state"] == "success" and attempts[-1]["try_number"] >= 2
    assert attempts[-1]["hostname"] != killed["hostname"]
    assert_archived_once(airflow.s3, airflow.src, airflow.dst, day, seeded)
    assert_clean(airflow)
    assert report(airflow, run_id)[day_prefix(day)]["status"] == "archived"
    print(f"\n[celery] killed {worker} mid-archive; the run was green {recovered:.0f}s later")


def test_scheduler_catches_up_missed_nightly_runs_and_a_rerun_of_them_is_green(celery_stack):
    airflow = celery_stack

    def caught_up():
        runs = runs_of(airflow, NIGHTLY, "scheduled")
        return runs if len(runs) == NIGHTLY_DAYS and all(r["state"] in ("success", "failed") for r in runs) else None

    runs = wait_for(caught_up, 300, "the nightly job's missed runs", airflow)
    assert [r["state"] for r in runs] == ["success"] * len(runs)
    archived = {}
    for run in runs:
        archived.update({p: row["status"] for p, row in report(airflow, run["dag_run_id"], NIGHTLY).items()})
    assert {day_prefix(d) for d in _nightly_days()} <= set(archived)
    for day in _nightly_days():
        assert_archived_once(airflow.s3, airflow.src, airflow.dst, day, airflow.nightly)

    # Re-run all of it (as clearing the runs in the UI does): every task green, every day skipped.
    for run in runs:
        airflow.api("POST", f"dags/{NIGHTLY}/dagRuns/{run['dag_run_id']}/clear", {"dry_run": False})
    for run in runs:
        wait_for(lambda r=run: airflow.api("GET", f"dags/{NIGHTLY}/dagRuns/{r['dag_run_id']}")["state"]
                 in ("queued", "running", "success") and
                 all(ti["try_number"] >= 2 for ti in task_instances(airflow, r["dag_run_id"], NIGHTLY)
                     if ti["task_id"] == "plan"), 60, "the cleared run to restart", airflow)
        assert wait_run(airflow, run["dag_run_id"], dag_id=NIGHTLY) == "success"
        states = {ti["task_id"]: ti["state"] for ti in task_instances(airflow, run["dag_run_id"], NIGHTLY)}
        assert set(states.values()) <= {"success", "skipped"}, states
        assert {row["status"] for row in report(airflow, run["dag_run_id"], NIGHTLY).values()} <= {"skipped"}
    for day in _nightly_days():
        assert_archived_once(airflow.s3, airflow.src, airflow.dst, day, airflow.nightly)


def test_a_paused_backfill_starts_no_new_day_and_resumed_archives_every_day_once(celery_stack):
    """A Backfill of four days, one run at a time: paused while its first day is held mid-archive,
    it starts no other day; an on-call run of that same day meets its lease, retries and skips
    it (no day archived twice); resumed, it archives every day once and every run is green."""
    airflow = celery_stack
    days = [date(2026, 6, 1) + timedelta(days=i) for i in range(4)]
    logical = [d + timedelta(days=MIN_AGE) for d in days]
    seeded = {}
    for day in days:
        seeded.update(seed_day(airflow.s3, airflow.src, TEMPLATE, day, files_per_hour=1, lines_per_file=10))
    held = stall_gets_of(airflow, days[0], count=24, seconds=600)
    backfill = airflow.api("POST", "backfills", {
        "dag_id": DAG_ID, "from_date": f"{logical[0]}T00:00:00Z", "to_date": f"{logical[-1]}T00:00:00Z",
        "run_backwards": False, "dag_run_conf": {}, "reprocess_behavior": "none", "max_active_runs": 1})
    try:
        assert wait_until(lambda: held.injected, 180), "the first day's archive did not start"
        assert airflow.api("PUT", f"backfills/{backfill['id']}/pause")["is_paused"] is True
        # On call archives the held day at the same time: its try meets the backfill's lease.
        on_call = trigger(airflow, {"prefixes": [day_prefix(days[0])]})
        wait_for(lambda: any(ti["task_id"] == "archive" and ti["state"] == "up_for_retry"
                             for ti in task_instances(airflow, on_call)), 180, "the on-call run to meet the lease", airflow)
    finally:
        airflow.proxy.faults.remove(held)
        airflow.proxy.released.set()  # the held GETs go on
    assert wait_run(airflow, on_call) == "success"
    airflow.proxy.released.clear()
    assert report(airflow, on_call)[day_prefix(days[0])]["status"] == "skipped"

    def backfill_runs():
        runs = [r for r in runs_of(airflow, DAG_ID, "backfill") if r["logical_date"][:10] in map(str, logical)]
        return runs if len(runs) == len(days) else None

    first = next(r for r in wait_for(backfill_runs, 60, "the backfill's runs", airflow)
                 if r["logical_date"].startswith(f"{logical[0]}"))
    assert wait_run(airflow, first["dag_run_id"]) == "success"
    # The on-call run was queued, retried and finished after the first day's run: the scheduler
    # went round many times, and started none of the paused backfill's days.
    waiting = [r for r in backfill_runs() if r["dag_run_id"] != first["dag_run_id"]]
    assert [(r["state"], r["start_date"]) for r in waiting] == [("queued", None)] * 3
    assert all(not keys_in(airflow.s3, airflow.dst, f"archive/{airflow.src}/{d:logs/%Y/%m/%d}.") for d in days[1:])

    assert airflow.api("PUT", f"backfills/{backfill['id']}/unpause")["is_paused"] is False
    runs = wait_for(lambda: (r := backfill_runs()) and all(x["state"] in ("success", "failed") for x in r) and r,
                    420, "the resumed backfill", airflow)
    assert sorted(r["state"] for r in runs) == ["success"] * len(days)
    for day in days:
        assert_archived_once(airflow.s3, airflow.src, airflow.dst, day, seeded)
    assert_clean(airflow)

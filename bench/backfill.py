"""A year's backfill, three ways, on the production stack: Airflow's time against the CLI's.

    make bench-backfill   # or: .venv/bin/python -m bench.backfill [--days N] [--backfill-days M]

Seeds (once: a marker object per day count says it is complete) N days (default 365) of 500
small log files each into the bench MinIO's ``bench-backfill`` bucket. Then, in one invocation
on the same cores, on ``devtools.airflow_celery``'s stack (PostgreSQL, Redis, two Celery
workers), each into its own destination, each archive counted:
- a date-range run of the archive DAG over the N days (the trigger form) through the REST API,
  against the CLI reference on the same days: ``s3arch archive``, one process per day, two at
  a time;
- Airflow's Backfill over the first M days' logical dates (default 60, as issue 39 measured:
  one DagRun per date costs minutes per hundred days), ``POST /api/v2/backfills``, against the
  CLI on those M days.
Prints wall time, the ratio to the CLI and the seconds of orchestration per day ((Airflow's
wall - the CLI's) / days). Output: bench/results/backfill-N.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

from bench.bench import DEST_BUCKET, RESULTS, bench_env, ensure_buckets, start_bench_minio
from devtools.airflow_celery import prepare_celery_airflow
from devtools.airflow_local import write_jobs_file
from devtools.sample_data import log_lines, put_extracted

BUCKET = "bench-backfill"
TEMPLATE = "logs/{date:%Y/%m/%d}/"
FIRST_DAY = date(2025, 1, 1)
OBJECTS_PER_DAY = 500
TARGETS = {"range": 1.25, "backfill": 1.5}  # issue 39: Airflow's wall / the CLI's
JOB = {"source": f"s3://{BUCKET}/", "prefix_template": TEMPLATE, "storage_class": "STANDARD", "codec": "gzip",
       "min_age_days": 1, "aws_conn_id": "s3_archive", "schedule": "@daily", "start_date": f"{FIRST_DAY}",
       "allow_empty": True, "memory_budget": "256MiB", "retries": 3, "retry_delay_seconds": 5,
       "pool": "s3_archive", "segments": 8, "segment_min_objects": 50000}  # as dags/archive_jobs.yaml


def _marker(days: int) -> str:
    return f"_seeded/{days}-days.json"


def _day_objects(day: date):
    import random

    rng = random.Random(f"backfill-{day}")
    prefix = TEMPLATE.format(date=day)
    for n in range(OBJECTS_PER_DAY):
        hour = n * 24 // OBJECTS_PER_DAY
        yield f"{prefix}{hour:02d}/app-{n:04d}.log", log_lines(day, hour, rng.randint(5, 20), rng)


def seed(s3, days: list[date]) -> bool:
    """Seed the days unless the marker says so; a seeding cut short is redone (same keys)."""
    ensure_buckets(s3, BUCKET, DEST_BUCKET)
    try:
        s3.head_object(Bucket=BUCKET, Key=_marker(len(days)))
        return False
    except s3.exceptions.ClientError:
        pass
    put_extracted(s3, BUCKET, (kv for day in days for kv in _day_objects(day)))
    s3.put_object(Bucket=BUCKET, Key=_marker(len(days)), Body=b"{}")
    return True


def clear(s3, stem: str) -> None:
    keys = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=DEST_BUCKET, Prefix=stem)
            for o in page.get("Contents", [])]
    for i in range(0, len(keys), 1000):
        s3.delete_objects(Bucket=DEST_BUCKET, Delete={"Objects": [{"Key": k} for k in keys[i:i + 1000]]})


def archives(s3, stem: str) -> int:
    return sum(o["Key"].endswith(".tar.gz") for page in s3.get_paginator("list_objects_v2").paginate(
        Bucket=DEST_BUCKET, Prefix=stem) for o in page.get("Contents", []))


def cli_reference(env: dict, days: list[date], stem: str) -> float:
    """One ``s3arch archive`` process per day, two at a time: the wall time of all of them."""
    def one(day: date) -> None:
        subprocess.run([sys.executable, "-m", "s3arch", "archive", f"s3://{BUCKET}/{TEMPLATE.format(date=day)}",
                        f"s3://{DEST_BUCKET}/{stem}", "--storage-class", "STANDARD", "--quiet"],
                       env=env, check=True, stdout=subprocess.DEVNULL)

    started = time.monotonic()
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(one, days))
    return time.monotonic() - started


def range_run(airflow, dag_id: str, days: list[date]) -> float:
    """One run of the archive DAG over the days, through the REST API: seconds to green."""
    started = time.monotonic()
    run_id = airflow.api("POST", f"dags/{dag_id}/dagRuns", {
        "logical_date": None, "conf": {"date_from": f"{days[0]}", "date_to": f"{days[-1]}"}})["dag_run_id"]

    def ended():
        state = airflow.api("GET", f"dags/{dag_id}/dagRuns/{run_id}")["state"]
        return state if state in ("success", "failed") else None

    state = airflow.wait_until(ended, 3600, "the range run")
    if state != "success":
        failed = [(ti["task_id"], ti["map_index"], ti["state"]) for ti in _pages(
            airflow, f"dags/{dag_id}/dagRuns/{run_id}/taskInstances", "task_instances")
            if ti["state"] not in ("success", "skipped")]
        raise RuntimeError(f"the range run {run_id} ended {state}: {failed}\n{airflow.log_tail('worker-1', 80)}")
    return time.monotonic() - started


def backfill(airflow, dag_id: str, days: list[date]) -> float:
    """Airflow's Backfill over the days' logical dates (each day + the job's age): seconds
    until every DagRun of it is green."""
    logical = [day + timedelta(days=JOB["min_age_days"]) for day in days]
    started = time.monotonic()
    airflow.api("POST", "backfills", {
        "dag_id": dag_id, "from_date": f"{logical[0]}T00:00:00Z", "to_date": f"{logical[-1]}T00:00:00Z",
        "run_backwards": False, "dag_run_conf": {}, "reprocess_behavior": "none"})

    def ended():
        runs = airflow.api("GET", f"dags/{dag_id}/dagRuns?run_type=backfill&limit=1&state=success")
        failed = airflow.api("GET", f"dags/{dag_id}/dagRuns?run_type=backfill&limit=1&state=failed")
        if failed["total_entries"]:
            raise RuntimeError(f"{failed['total_entries']} backfill run(s) failed")
        return runs["total_entries"] == len(days)

    airflow.wait_until(ended, 4 * 3600, "the backfill")
    return time.monotonic() - started


def _seconds(later: str | None, earlier: str | None) -> float | None:
    if not (later and earlier):
        return None
    return (datetime.fromisoformat(later) - datetime.fromisoformat(earlier)).total_seconds()


def _pages(airflow, path: str, field: str) -> list[dict]:
    """Every entry of a listing of the REST API (it answers at most 100 at a time)."""
    entries: list[dict] = []
    while True:
        page = airflow.api("GET", f"{path}{'&' if '?' in path else '?'}limit=100&offset={len(entries)}")[field]
        entries += page
        if len(page) < 100:
            return entries


def where_time_goes(airflow, dag_id: str) -> dict:
    """Per task of the Backfill's DagRuns, mean seconds from the upstream's end (the run's
    start for the first) to scheduled, scheduled to queued, queued to running (the Celery
    worker's start), running to done; and the slot-seconds each task held in total."""
    runs = {r["dag_run_id"]: r for r in _pages(airflow, f"dags/{dag_id}/dagRuns?run_type=backfill", "dag_runs")}
    instances = [ti for ti in _pages(airflow, f"dags/{dag_id}/dagRuns/~/taskInstances", "task_instances")
                 if ti["dag_run_id"] in runs and ti["start_date"]]
    ended: dict[str, list[str]] = {}  # each run's task end times, to find a task's upstream end
    for ti in instances:
        ended.setdefault(ti["dag_run_id"], []).append(ti["end_date"])
    phases: dict[str, dict[str, list[float]]] = {}
    for ti in instances:
        before = [e for e in ended[ti["dag_run_id"]] if e and e <= (ti["scheduled_when"] or ti["queued_when"] or ti["start_date"])]
        upstream_end = max(before, default=runs[ti["dag_run_id"]]["start_date"])
        steps = {"to_scheduled": _seconds(ti["scheduled_when"], upstream_end),
                 "scheduled_to_queued": _seconds(ti["queued_when"], ti["scheduled_when"]),
                 "queued_to_running": _seconds(ti["start_date"], ti["queued_when"]),
                 "running": _seconds(ti["end_date"], ti["start_date"])}
        for step, value in steps.items():
            if value is not None:
                phases.setdefault(ti["task_id"], {}).setdefault(step, []).append(value)
    table = {task: {**{step: round(sum(v) / len(v), 2) for step, v in steps.items()},
                    "instances": len(steps["running"]), "slot_s": round(sum(steps["running"]), 1)}
             for task, steps in phases.items()}
    for task, row in table.items():
        print(f"  {task:<10} " + ", ".join(f"{k} {v}" for k, v in row.items()), flush=True)
    return table


def _line(name: str, wall: float, cli: float, days: int) -> dict:
    figures = {"wall_s": round(wall, 1), "cli_wall_s": round(cli, 1), "vs_cli": round(wall / cli, 2),
               "orchestration_s_per_day": round((wall - cli) / days, 3)}
    print(f"{name:<26} Airflow {wall:>7.1f} s, CLI {cli:>7.1f} s: {figures['vs_cli']:.2f}x the CLI, "
          f"{figures['orchestration_s_per_day']:.2f} s of orchestration per day", flush=True)
    return figures


def run_airflow(server, days: list[date], backfilled: list[date]) -> dict:
    home = Path(tempfile.mkdtemp(prefix="s3arch-bench-backfill-"))
    jobs = write_jobs_file(home / "jobs.yaml", {
        "range": {**JOB, "destination": f"s3://{DEST_BUCKET}/backfill-range/"},
        "dagruns": {**JOB, "destination": f"s3://{DEST_BUCKET}/backfill-dagruns/"}})
    airflow = prepare_celery_airflow(home, server, jobs, pool_slots=4)
    try:
        airflow.start()
        for dag_id in ("s3_archive__range", "s3_archive__dagruns"):
            airflow.wait_until(lambda d=dag_id: _parsed(airflow, d), 300, f"{dag_id} to be parsed")
        time.sleep(10)  # the scheduler's own run of each job's latest day (empty: allowed) goes first
        seconds = {"range": range_run(airflow, "s3_archive__range", days)}
        seconds["backfill"] = backfill(airflow, "s3_archive__dagruns", backfilled)
        seconds["backfill_tasks"] = where_time_goes(airflow, "s3_archive__dagruns")
    finally:
        airflow.stop()
        shutil.rmtree(home, ignore_errors=True)
    return seconds


def _parsed(airflow, dag_id: str) -> bool:
    try:
        return airflow.api("GET", f"dags/{dag_id}")["dag_id"] == dag_id
    except RuntimeError:
        return False


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--days", type=int, default=365, help="days of the range run")
    parser.add_argument("--backfill-days", type=int, default=60, help="logical dates of the Backfill")
    parser.add_argument("--output", help="result file name under bench/results (default backfill-DAYS.json)")
    args = parser.parse_args(argv)
    days = [FIRST_DAY + timedelta(days=i) for i in range(args.days)]
    server = start_bench_minio()
    try:
        env, s3 = bench_env(server), server.client(max_pool_connections=32)
        started = time.monotonic()
        if seed(s3, days):
            print(f"seeded {len(days) * OBJECTS_PER_DAY:,} objects in {time.monotonic() - started:.0f} s", flush=True)
        backfilled = days[:args.backfill_days]
        expected = {"cli": len(days), "cli-subset": len(backfilled), "range": len(days), "dagruns": len(backfilled)}
        for name in expected:
            clear(s3, f"backfill-{name}/")
        cli = {"range": cli_reference(env, days, "backfill-cli/"),
               "backfill": cli_reference(env, backfilled, "backfill-cli-subset/")}
        airflow = run_airflow(server, days, backfilled)
        counts = {name: archives(s3, f"backfill-{name}/") for name in expected}
        if counts != expected:
            raise RuntimeError(f"archives made: {counts}, expected {expected}")
        results = {"days": len(days), "backfill_days": len(backfilled), "objects_per_day": OBJECTS_PER_DAY,
                   "when": datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ"),
                   "load_average_1min_at_end": round(os.getloadavg()[0], 1)}
        results["range_run"] = _line(f"date-range run, {len(days)} days", airflow["range"], cli["range"], len(days))
        results["backfill"] = _line(f"Backfill, {len(backfilled)} dates", airflow["backfill"], cli["backfill"],
                                    len(backfilled))
        results["backfill"]["per_task_mean_s"] = airflow["backfill_tasks"]
        results["targets"] = {"range_run": TARGETS["range"], "backfill": TARGETS["backfill"]}
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / (args.output or f"backfill-{len(days)}.json")).write_text(json.dumps(results, indent=1) + "\n")
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

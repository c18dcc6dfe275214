"""`make airflow` and `make airflow-celery`: the Airflow UI on this machine, against an
embedded MinIO with sample logs.

Starts MinIO (with its console), seeds the last ten days of sample logs into app-logs,
prepares an Airflow home in .cache/ (the s3_archive pool and connection) and runs the
api-server, scheduler, dag-processor and triggerer until Ctrl-C or SIGTERM, then stops
everything by PID. Try a backfill or a date-range trigger of s3_archive__app_logs.

``--celery`` runs the production topology instead of SQLite and the LocalExecutor:
PostgreSQL, Redis and two Celery workers with distinct hostnames (devtools/airflow_celery.py),
and one of the sample days holds enough objects for the shipped job to archive it as
segment tasks spread over both workers.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from datetime import date, timedelta
from pathlib import Path

from devtools.airflow_local import prepare_airflow
from devtools.demo import ARCHIVE_BUCKET, JOBS_FILE, SOURCE_BUCKET, TEMPLATE
from devtools.sample_data import days, seed_day, seed_large_day
from devtools.servers import ROOT, free_loopback_port, start_minio
from devtools.stopping import stop_all_started, stop_on_signals, stopping


def _port(preferred: int) -> int:
    import socket

    if not preferred:
        return free_loopback_port()
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", preferred))
            return preferred
        except OSError:
            return free_loopback_port()


def _large_day_objects() -> int:
    """Objects that make one sample day large enough for the shipped job's segments
    (``S3ARCH_LARGE_DAY_OBJECTS`` overrides it; 0: no large day, as the stop test has it)."""
    from s3arch.jobs import load_jobs

    if os.environ.get("S3ARCH_LARGE_DAY_OBJECTS"):
        return int(os.environ["S3ARCH_LARGE_DAY_OBJECTS"])
    return load_jobs(JOBS_FILE)["app_logs"].segment_min_objects


def _say(text: str) -> None:
    """Print, but never let a closed terminal or pipe interrupt the stop."""
    try:
        print(text, flush=True)
    except OSError:
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.airflow_ui", description=__doc__.split("\n\n")[0])
    parser.add_argument("--celery", action="store_true",
                        help="PostgreSQL, Redis and two Celery workers instead of SQLite and the LocalExecutor")
    parser.add_argument("--home", type=Path, help="the Airflow home, emptied first (default: .cache/airflow-ui, "
                        "with --celery .cache/airflow-celery)")
    parser.add_argument("--port", type=int, default=8080,
                        help="the UI's port when it is free, else any free one (default 8080; 0: any free one)")
    args = parser.parse_args(argv)
    # Ctrl-C, SIGTERM (a process manager, `timeout`, CI) or SIGHUP: one stop, which no
    # further signal interrupts (make forwards a second SIGTERM); devtools/stopping.py.
    stop_on_signals()
    home = (args.home or ROOT / ".cache" / ("airflow-celery" if args.celery else "airflow-ui")).resolve()
    shutil.rmtree(home, ignore_errors=True)
    server = airflow = None
    try:
        server = start_minio(console=True)
        s3 = server.client(max_pool_connections=64)
        for bucket in (SOURCE_BUCKET, ARCHIVE_BUCKET):
            s3.create_bucket(Bucket=bucket)
        last = date.today() - timedelta(days=1)
        large = last - timedelta(days=5)
        for day in days(last - timedelta(days=9), last):
            if args.celery and day == large:
                count = _large_day_objects()
                print(f"seeding {count:,} objects for {day} (archived as segment tasks; about two minutes) ...",
                      flush=True)
                seed_large_day(s3, SOURCE_BUCKET, TEMPLATE, day, count)
            else:
                seed_day(s3, SOURCE_BUCKET, TEMPLATE, day, files_per_hour=10, lines_per_file=60)
        if args.celery:
            from devtools.airflow_celery import WORKERS, prepare_celery_airflow

            print("starting PostgreSQL and Redis, migrating the metadata DB ...", flush=True)
            airflow = prepare_celery_airflow(home, server, JOBS_FILE, api_port=_port(args.port))
            topology = (f"PostgreSQL :{airflow.postgres.port}, Redis :{airflow.redis.port}, "
                        f"Celery workers {', '.join(f's3arch-{w}' for w in WORKERS)}")
        else:
            airflow = prepare_airflow(home, server, JOBS_FILE, api_port=_port(args.port))
            topology = "SQLite, LocalExecutor"
        print(f"starting {', '.join(airflow.commands())} ...", flush=True)
        airflow.start()
        sample = f"{last - timedelta(days=9)} .. {last}" + (f"; {large} is large: segment tasks" if args.celery else "")
        print(f"""
Airflow UI:      {airflow.api_url}   (every visitor is admin: local use only)
  stack:         {topology}
  DAG:           s3_archive__app_logs  (sample logs for {sample})
  try:           Trigger with a date range, or a Backfill over logical dates; clear one
                 mapped 'archive' task to re-run a single prefix
MinIO console:   {server.console_url}   user {server.access_key}  password {server.secret_key}
Airflow home:    {home}  (logs of the processes: *.log)

Ctrl-C stops everything.""", flush=True)
        while all(p.poll() is None for p in airflow.processes.values()):
            time.sleep(1)
        print("an Airflow process exited; see the logs in", home)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        stopping()  # from here on no signal interrupts the stop
        _say("stopping every process this started (a further Ctrl-C or SIGTERM is ignored) ...")
        began = time.monotonic()
        try:
            if airflow:
                airflow.stop()
                _say(f"  Airflow's processes stopped ({time.monotonic() - began:.1f} s)")
        finally:
            try:
                if server:
                    server.stop()
            finally:
                stop_all_started()  # whatever an interrupted start left
                _say(f"stopped in {time.monotonic() - began:.1f} s")


if __name__ == "__main__":
    sys.exit(main())

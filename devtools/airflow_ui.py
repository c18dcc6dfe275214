"""`make airflow`: the Airflow UI on this machine, against an embedded MinIO with sample logs.

Starts MinIO (with its console), seeds the last ten days of sample logs into app-logs,
prepares an Airflow home in .cache/airflow-ui (SQLite, LocalExecutor, the s3_archive pool
and connection) and runs the api-server, scheduler, dag-processor and triggerer until Ctrl-C, then
stops everything by PID. Try a backfill or a date-range trigger of s3_archive__app_logs.
"""

from __future__ import annotations

import shutil
import signal
import sys
import time
from datetime import date, timedelta

from devtools.airflow_local import prepare_airflow
from devtools.demo import ARCHIVE_BUCKET, JOBS_FILE, SOURCE_BUCKET, TEMPLATE
from devtools.sample_data import days, seed_day
from devtools.servers import ROOT, free_loopback_port, start_minio


def _port(preferred: int) -> int:
    import socket

    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", preferred))
            return preferred
        except OSError:
            return free_loopback_port()


def main() -> int:
    server = start_minio(console=True)
    home = ROOT / ".cache" / "airflow-ui"
    shutil.rmtree(home, ignore_errors=True)
    airflow = None
    try:
        s3 = server.client()
        for bucket in (SOURCE_BUCKET, ARCHIVE_BUCKET):
            s3.create_bucket(Bucket=bucket)
        last = date.today() - timedelta(days=1)
        for day in days(last - timedelta(days=9), last):
            seed_day(s3, SOURCE_BUCKET, TEMPLATE, day, files_per_hour=10, lines_per_file=60)
        airflow = prepare_airflow(home, server, JOBS_FILE, api_port=_port(8080))
        print("starting the Airflow api-server, scheduler, dag-processor and triggerer ...", flush=True)
        airflow.start()
        print(f"""
Airflow UI:      {airflow.api_url}   (every visitor is admin: local use only)
  DAG:           s3_archive__app_logs  (sample logs for {last - timedelta(days=9)} .. {last})
  try:           Trigger with a date range, or a Backfill over logical dates; clear one
                 mapped 'archive' task to re-run a single prefix
MinIO console:   {server.console_url}   user {server.access_key}  password {server.secret_key}
Airflow home:    {home}  (logs of the processes: *.log)

Ctrl-C stops everything.""", flush=True)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        while all(p.poll() is None for p in airflow.processes.values()):
            time.sleep(1)
        print("an Airflow process exited; see the logs in", home)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        if airflow:
            airflow.stop()
        server.stop()


if __name__ == "__main__":
    sys.exit(main())

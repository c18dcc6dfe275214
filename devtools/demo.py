"""`make demo`: the archive DAG end to end on an embedded S3 with sample logs.

Starts MinIO on loopback, seeds three days of hourly log files, runs the shipped archive DAG
(`dags/archive_jobs.yaml`, job `app_logs`) for those days with `airflow dags test` on a
throwaway SQLite Airflow, then uses the CLI to list an archive, read one object back with a
ranged GET and verify the whole archive, shows that a second run of the DAG skips every day,
and stops MinIO again.

On a fresh clone MinIO is still building (`make demo` starts devtools/build_minio.sh in the
background, a few minutes with a cold Go cache): then the demo runs on moto server instead,
says so, and says where the build's log is. moto server answers what the demo's archiver and
CLI ask of S3 as S3 does: the conditional writes of the lease and the commit (``If-None-Match:
*`` and ``If-Match``, 412 when they fail) and ranged GETs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import date, timedelta
from pathlib import Path

from devtools.airflow_local import prepare_airflow
from devtools.sample_data import days, seed_day
from devtools.servers import MINIO_BUILD_LOG, ROOT, minio_build_state, start_minio, start_moto
from devtools.stopping import stop_all_started, stop_on_signals, stopping

JOBS_FILE = ROOT / "dags" / "archive_jobs.yaml"
DAG_ID = "s3_archive__app_logs"
SOURCE_BUCKET, ARCHIVE_BUCKET = "app-logs", "log-archive"
TEMPLATE = "logs/{date:%Y/%m/%d}/"


S3ARCH = Path(sys.executable).with_name("s3arch")  # installed with the package (make venv)


def run_cli(env, *args, capture=True) -> subprocess.CompletedProcess:
    print("$ s3arch " + " ".join(args), flush=True)
    return subprocess.run([str(S3ARCH), *args], env=env, cwd=ROOT, check=True,
                          text=True, stdout=subprocess.PIPE if capture else None)


def run_dag(airflow, first: date, last: date, log: Path) -> None:
    """`airflow dags test` with a date range; print only the report's table."""
    conf = json.dumps({"date_from": str(first), "date_to": str(last)})
    print(f"$ airflow dags test {DAG_ID} --conf '{conf}'   (full log: {log})", flush=True)
    result = airflow.cli("dags", "test", DAG_ID, "--conf", conf, check=False)
    log.write_text(result.stdout)
    lines = result.stdout.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("prefix ")), None)
    if result.returncode or start is None:
        print(result.stdout[-4000:])
        raise SystemExit(f"the DAG run failed; see {log}")
    end = next(i for i in range(start, len(lines)) if lines[i].split()[0][0].isdigit())
    print("\n".join("  " + line for line in lines[start:end + 1]) + "\n")


def start_s3():
    """MinIO once it is built; before that (a fresh clone) moto server, saying why."""
    state = minio_build_state()
    if state == "built":
        server = start_minio()
        print(f"embedded MinIO (pid {server.pid}) at {server.endpoint_url}")
        return server
    server = start_moto()
    print(f"embedded moto server (pid {server.pid}) at {server.endpoint_url}: {minio_note(state)}\n"
          "moto answers this demo's S3 calls as S3 does: conditional writes (If-None-Match, If-Match;"
          " 412 when they fail) and ranged GETs.")
    return server


def minio_note(state: str) -> str:
    log = MINIO_BUILD_LOG.relative_to(ROOT) if MINIO_BUILD_LOG.is_relative_to(ROOT) else MINIO_BUILD_LOG
    if state == "building":
        return f"MinIO is still building in the background (log: {log}); make test waits for it."
    if state == "built":
        return "MinIO is built now: the next make demo, and make test, use it."
    return f"MinIO is not built: make minio or make test builds it (Go >= 1.24; the last build's log: {log})."


def main() -> int:
    # The newest three days the job may archive (it leaves the last min_age_days alone).
    last = date.today() - timedelta(days=1)
    first = last - timedelta(days=2)
    # Ctrl-C, SIGTERM or SIGHUP: one stop, which no further signal interrupts (devtools/stopping.py).
    stop_on_signals()
    home = ROOT / ".cache" / "demo-airflow"  # kept after the demo, for its logs
    shutil.rmtree(home, ignore_errors=True)
    server = None
    try:
        server = start_s3()
        s3 = server.client()
        for bucket in (SOURCE_BUCKET, ARCHIVE_BUCKET):
            s3.create_bucket(Bucket=bucket)
        def seed_sample_logs() -> None:
            seeded = sum(len(seed_day(s3, SOURCE_BUCKET, TEMPLATE, day, files_per_hour=40, lines_per_file=60))
                         for day in days(first, last))
            print(f"seeded {seeded:,} log files under s3://{SOURCE_BUCKET}/{TEMPLATE.format(date=first)}"
                  f" .. {TEMPLATE.format(date=last)}\n")

        print(f"a throwaway Airflow (SQLite) in {home}; job 'app_logs' from {JOBS_FILE.relative_to(ROOT)}")
        # Its DB migrates while the sample logs are seeded: a fresh clone's slowest step.
        airflow = prepare_airflow(home, server, JOBS_FILE, meanwhile=seed_sample_logs)
        run_dag(airflow, first, last, home / "dag-run-1.log")

        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update(server.env(), PYTHONPATH=str(ROOT))
        archive = f"s3://{ARCHIVE_BUCKET}/archive/{SOURCE_BUCKET}/{TEMPLATE.format(date=last).rstrip('/')}.tar.gz"
        members = run_cli(env, "ls", archive).stdout.splitlines()
        print(f"  {len(members)} members, first: {members[0].strip()}")
        key = f"{TEMPLATE.format(date=last)}13/app-0007.log"
        text = run_cli(env, "cat", archive, key).stdout
        print(f"  {key}: {len(text.splitlines())} lines, first: {text.splitlines()[0]}")
        run_cli(env, "verify", archive, capture=False)
        back = home / "restored"
        run_cli(env, "extract", archive, "--to-dir", str(back), "--glob", f"{TEMPLATE.format(date=last)}13/*",
                capture=False)
        print(f"  the 13:00 hour is back in {back}")

        print("\nthe same run again: every day is already archived, so each is skipped")
        run_dag(airflow, first, last, home / "dag-run-2.log")
        print("what the demo made:")
        for obj in s3.list_objects_v2(Bucket=ARCHIVE_BUCKET)["Contents"]:
            print(f"  s3://{ARCHIVE_BUCKET}/{obj['Key']}  {obj['Size']:,} bytes")
        print(f"\ndemo finished; stopping {server.name} (its data is removed; Airflow logs stay in {home}).")
        if server.name != "MinIO":
            print(minio_note(minio_build_state()))
        print("To click through the same DAG in the Airflow UI: make airflow")
        return 0
    except KeyboardInterrupt:
        return 130
    finally:
        stopping()  # from here on no signal interrupts the stop
        try:
            if server:
                server.stop()
        finally:
            stop_all_started()  # whatever an interrupted start left


if __name__ == "__main__":
    sys.exit(main())

"""`make airflow` and `make airflow-celery`: the Airflow UI on this machine, against an
embedded MinIO with sample logs.

Starts MinIO (with its console), seeds sample logs into app-logs (the last ten days, and
the days the README's and docs/JOBS.md's Airflow examples name: ``EXAMPLE_DAYS``), prepares
an Airflow home in .cache/ (the s3_archive pool and connection) and runs the api-server,
scheduler, dag-processor and triggerer until Ctrl-C or SIGTERM, then stops everything by PID.
Its SimpleAuthManager has three users, not every visitor an admin: ``admin``, ``user`` (may
trigger) and ``viewer`` (may only read), each with the role of its name; the api-server
generates their passwords into ``HOME/simple_auth_manager_passwords.json.generated``.
It writes ``HOME/env.sh``: sourced in another shell, it gives the ``airflow`` CLI this
Airflow's configuration, and ``$AIRFLOW_URL`` and ``$TOKEN`` for its REST API, so the
documented commands run there as printed (tests/test_airflow_e2e_docs.py runs them).

``--celery`` runs the production topology instead of SQLite and the LocalExecutor:
PostgreSQL, Redis and two Celery workers with distinct hostnames (devtools/airflow_celery.py),
and one of the sample days holds enough objects for the shipped job to archive it as
segment tasks spread over both workers.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import time
import urllib.error
import urllib.request
from datetime import date, timedelta
from pathlib import Path

from devtools.airflow_local import prepare_airflow
from devtools.demo import ARCHIVE_BUCKET, JOBS_FILE, SOURCE_BUCKET, TEMPLATE
from devtools.sample_data import day_objects, days, put_extracted, seed_large_day
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
    from s3arch.ops.jobs import load_jobs

    if os.environ.get("S3ARCH_LARGE_DAY_OBJECTS"):
        return int(os.environ["S3ARCH_LARGE_DAY_OBJECTS"])
    return load_jobs(JOBS_FILE)["app_logs"].segment_min_objects


# Days the documented examples name, seeded besides the last ten days so that each example
# goes green as printed: README's on-call prefix and date range (2026-11-01 .. 2026-11-07), and
# docs/JOBS.md's backfill of the logical dates 2026-01-01 .. 2026-01-03, each of which archives
# its date minus the job's min_age_days (1): 2025-12-31 .. 2026-01-02.
EXAMPLE_DAYS = (*days(date(2026, 11, 1), date(2026, 11, 7)), *days(date(2025, 12, 31), date(2026, 1, 2)))


def seed_samples(s3, today: date, *, large_objects: int = 0) -> tuple[date, date, date | None]:
    """Seed what ``make airflow`` serves: the ten days before ``today`` (240 log files each;
    with ``large_objects``, one of them that large, for segment tasks) and ``EXAMPLE_DAYS``
    (48 files each). Returns the recent days' first and last, and the large day."""
    last = today - timedelta(days=1)
    first = last - timedelta(days=9)
    large = last - timedelta(days=5) if large_objects else None
    recent = set(days(first, last))
    objects: dict[str, bytes] = {}
    for day in days(first, last):
        if day == large:
            print(f"seeding {large_objects:,} objects for {day} (archived as segment tasks; about two minutes) ...",
                  flush=True)
            seed_large_day(s3, SOURCE_BUCKET, TEMPLATE, day, large_objects)
        else:
            objects.update(day_objects(TEMPLATE, day, files_per_hour=10, lines_per_file=60))
    for day in EXAMPLE_DAYS:
        if day not in recent:
            objects.update(day_objects(TEMPLATE, day, files_per_hour=2, lines_per_file=60))
    # 2,880 small files: tar batches MinIO unpacks, not a PUT each (put_extracted's figures)
    put_extracted(s3, SOURCE_BUCKET, objects.items())
    return first, last, large


# SimpleAuthManager's users of `make airflow`, each with the role of its name.
USERS = ("admin", "user", "viewer")


def with_users(airflow) -> Path:
    """Give ``airflow`` (prepared, not started) SimpleAuthManager's ``USERS`` instead of every
    visitor an admin. Returns the file its api-server writes their generated passwords to (the
    default, in the Airflow home) at its first start."""
    airflow.env.update({"AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
                        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(f"{u}:{u}" for u in USERS)})
    return passwords_file(airflow)


def passwords_file(airflow) -> Path:
    return Path(airflow.env.get("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE")
                or airflow.home / "simple_auth_manager_passwords.json.generated")


def admin_token(airflow) -> str:
    """A REST API token of an admin: with SimpleAuthManager's users, ``admin`` signs in with
    the password the api-server generated; with every visitor an admin (the tests' shared
    stack), anyone gets one."""
    if airflow.env.get("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS", "True").lower() == "true":
        request = urllib.request.Request(f"{airflow.api_url}/auth/token")
    else:
        password = json.loads(passwords_file(airflow).read_text())["admin"]
        request = urllib.request.Request(f"{airflow.api_url}/auth/token", method="POST",
                                         data=json.dumps({"username": "admin", "password": password}).encode(),
                                         headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())["access_token"]


ARCHIVE_DAG = "s3_archive__app_logs"


def archive_sample_days(airflow, token: str, first: date, last: date, wait_s: float = 180) -> str:
    """Trigger one run of the archive DAG for ``first`` .. ``last`` as the admin, so the catalog
    opens on archived days, not only missing ones. Retries while the dag-processor has not
    parsed the DAG yet (404) or SQLite is busy (503). Returns the run's id."""
    body = json.dumps({"logical_date": None, "conf": {"date_from": first.isoformat(),
                                                       "date_to": last.isoformat()}}).encode()
    deadline = time.monotonic() + wait_s
    while True:
        request = urllib.request.Request(f"{airflow.api_url}/api/v2/dags/{ARCHIVE_DAG}/dagRuns", method="POST",
                                         data=body, headers={"Content-Type": "application/json",
                                                             "Authorization": f"Bearer {token}"})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return json.loads(response.read())["dag_run_id"]
        except urllib.error.HTTPError as exc:
            if exc.code not in (404, 503) or time.monotonic() > deadline:
                raise RuntimeError(f"triggering {ARCHIVE_DAG}: HTTP {exc.code}: "
                                   f"{exc.read().decode(errors='replace')[:500]}") from None
        time.sleep(2)


def write_env_file(airflow, path: Path) -> Path:
    """``path``: a shell file that gives another shell this Airflow: its configuration (the
    AIRFLOW_* and S3ARCH_* settings, the MinIO credentials for the s3arch CLI), the venv's
    ``airflow`` first on PATH, ``AIRFLOW_URL`` and an admin's ``TOKEN`` for the REST API (it
    lasts [api_auth] jwt_expiration_time)."""
    token = admin_token(airflow)
    env = {k: v for k, v in airflow.env.items() if k.startswith(("AIRFLOW", "S3ARCH_", "AWS_"))}
    lines = ["# Written by `make airflow` (devtools/airflow_ui.py): source it in another shell.",
             f"export PATH={shlex.quote(str(Path(sys.executable).parent))}:\"$PATH\""]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in sorted(env.items())]
    lines += [f"export AIRFLOW_URL={shlex.quote(airflow.api_url)}", f"export TOKEN={shlex.quote(token)}"]
    path.write_text("\n".join(lines) + "\n")
    os.chmod(path, 0o600)  # it holds the MinIO keys and a token
    return path


def _shown(path: Path) -> Path:
    """``path`` relative to the repository when it is inside it (as the README prints it)."""
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


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
        first, last, large = seed_samples(s3, date.today(), large_objects=_large_day_objects() if args.celery else 0)
        if args.celery:
            from devtools.airflow_celery import WORKERS, prepare_celery_airflow

            print("starting PostgreSQL and Redis, migrating the metadata DB ...", flush=True)
            airflow = prepare_celery_airflow(home, server, JOBS_FILE, api_port=_port(args.port))
            topology = (f"PostgreSQL :{airflow.postgres.port}, Redis :{airflow.redis.port}, "
                        f"Celery workers {', '.join(f's3arch-{w}' for w in WORKERS)}")
        else:
            airflow = prepare_airflow(home, server, JOBS_FILE, api_port=_port(args.port))
            topology = "SQLite, LocalExecutor"
        passwords = with_users(airflow)
        print(f"starting {', '.join(airflow.commands())} ...", flush=True)
        airflow.start()
        env_file = write_env_file(airflow, home / "env.sh")
        # The catalog opens on something to look at: the recent days archived by one run (the
        # scheduled run archives the last one too), the examples' days left missing for the
        # documented commands and the catalog's "archive" to fill.
        run_id = archive_sample_days(airflow, admin_token(airflow), first, last)
        sample = f"{first} .. {last}" + (f"; {large} is large: segment tasks" if large else "")
        examples = f"{EXAMPLE_DAYS[0]} .. {EXAMPLE_DAYS[6]}, {EXAMPLE_DAYS[7]} .. {EXAMPLE_DAYS[-1]}"
        print(f"""
Airflow UI:      {airflow.api_url}   (local use only)
  sign in as:    {', '.join(USERS)}  (SimpleAuthManager roles of those names; a viewer may only read)
  passwords:     {passwords}
  catalog:       Browse > Archive catalog
  stack:         {topology}
  DAG:           s3_archive__app_logs  (sample logs for {sample};
                 and for the documented examples' days: {examples})
  first run:     {run_id} archives {first} .. {last} (a minute or two);
                 the examples' days stay missing: archive them from the catalog or as below
  try:           Trigger with a date range, or a Backfill over logical dates; clear one
                 mapped 'archive' task to re-run a single prefix
  CLI and REST:  in another shell, `source {_shown(env_file)}`, then the README's
                 `airflow dags trigger ...` / `airflow backfill create ...` and `curl` examples
                 ($TOKEN is admin's)
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

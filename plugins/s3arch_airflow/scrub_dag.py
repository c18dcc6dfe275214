"""Scrub DAGs: ``s3_scrub__<job>`` for every job of a jobs file (docs/CATALOG.md, "Scrub").

Monthly by default (``S3ARCH_SCRUB_SCHEDULE`` in the environment changes it for all jobs;
``none``: triggered by hand only); params: a date range (default: the job's start to its newest day)
and the sample size. One task: it HEADs every archive, manifest and index against what the
manifest records, reads a sample of members from readable archives, writes its result beside
the archives (the catalog shows it) and fails with a table of the drift, one row per day.

A DAG file in the DAGs folder needs only::

    from s3arch_airflow.factory import scrub_dags

    globals().update(scrub_dags("/path/to/archive_jobs.yaml"))
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone

from airflow.sdk import DAG, Param, task

from s3arch.ops.archive_job import ArchiveJob

SCHEDULE_ENV = "S3ARCH_SCRUB_SCHEDULE"

SCRUB_PARAMS = {
    "date_from": Param(None, type=["null", "string"], format="date", title="First date",
                       description="First day to scrub (YYYY-MM-DD); empty: the job's start date."),
    "date_to": Param(None, type=["null", "string"], format="date", title="Last date",
                     description="Last day to scrub, inclusive; empty: the job's newest archivable day."),
    "sample": Param(3, type="integer", minimum=0, maximum=1000, title="Members sampled per archive",
                    description="Members read by ranged GET and checked against their SHA-256, per archive "
                                "in a readable class (or restored); 0 checks headers only."),
}

SCRUB_DOC = """Scrub: proves the job's archives are still whole (docs/CATALOG.md).

For each archived day: HEAD of the archive, manifest and index against the manifest's record (size, ETag,
CRC32C, Object Lock retention); no restore is needed. Archives in a readable class get a sample of members
read back and checked. Drift fails the task with a table of days and what to do; the result is written
beside the archives (`_s3arch-scrub/<job>/`) and shown in the archive catalog.
"""


def _schedule() -> str | None:
    """``$S3ARCH_SCRUB_SCHEDULE`` (a cron or preset; ``none`` for manual runs only), else monthly."""
    chosen = os.environ.get(SCHEDULE_ENV) or "@monthly"
    return None if chosen.lower() == "none" else chosen


def scrub_dag(job: ArchiveJob) -> DAG:
    with DAG(
        dag_id=f"s3_scrub__{job.name}",
        description=f"Check every archive of job {job.name} in {job.destination} against its manifest",
        schedule=_schedule(),
        start_date=datetime.combine(job.start_date, datetime.min.time(), tzinfo=timezone.utc),
        catchup=False,
        max_active_runs=1,
        params=SCRUB_PARAMS,
        tags=["s3-archive", "scrub"],
        doc_md=SCRUB_DOC,
        default_args={"retries": 0},
    ) as dag:

        @task(task_id="scrub", execution_timeout=timedelta(hours=6), pool=job.pool)
        def scrub_archives(params: dict) -> dict:
            from s3arch_airflow.compat import AirflowFailException
            from s3arch_airflow.hooks import S3ArchHook, failing_task

            from s3arch.ops.scrub import parse_range, scrub

            with failing_task(f"scrub of {job.name}"):
                first, last = parse_range(job, params.get("date_from"), params.get("date_to"))
                store = S3ArchHook.for_job(job, "catalog").engine_clients().store
                result = scrub(job, store, first, last, sample=int(params.get("sample") or 0))
            print(f"{result.checked} archive(s) from {first} to {last}: {len(result.verified)} verified, "
                  f"{result.sampled} member(s) sampled; result {result.result_url}")
            print(result.cost_line())
            print(result.table())
            if not result.ok:
                raise AirflowFailException(f"scrub found drift in {len({d.day for d in result.drift})} day(s):\n"
                                           + result.table())
            return {k: v for k, v in result.to_dict().items() if k != "verified"}

        scrub_archives()  # type: ignore[call-arg,misc]  # params come from the context
    return dag

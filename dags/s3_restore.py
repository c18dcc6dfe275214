"""Restore DAGs: one per job in the jobs file (docs/RESTORE.md), named ``s3_restore__<job>``.

Triggered by hand (no schedule) with a form: a date range or exact prefixes, optionally only
some keys or a glob, a target (another bucket/prefix, or empty for the original location), the
restore tier and how many days the restored copy stays. It plans one mapped task per archived
prefix: request the restore, **defer** on the triggerer until S3 has restored the archive (no
worker is held during the hours that takes), then extract by ranged GETs. A report lists per
prefix the objects restored, bytes, already present, and failures.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone
from pathlib import Path

from airflow.sdk import DAG, Param, TriggerRule, task
from s3arch_airflow.report import job_task_args
from s3arch_airflow.restore import RESTORE_ROWS_XCOM_KEY, S3RestoreArchiveOperator

from s3arch.jobs import ArchiveJob, load_jobs

JOBS_FILE = Path(os.environ.get("S3ARCH_JOBS_FILE") or Path(__file__).with_name("archive_jobs.yaml"))

PARAMS = {
    "date_from": Param(None, type=["null", "string"], format="date", title="First date",
                       description="Restore a range of archived days: first day (YYYY-MM-DD)."),
    "date_to": Param(None, type=["null", "string"], format="date", title="Last date",
                     description="Last day of the range, inclusive (YYYY-MM-DD)."),
    "prefixes": Param(None, type=["null", "array"], items={"type": "string"}, title="Prefixes (optional)",
                      description="Exact archived prefixes instead of dates, e.g. logs/2026/11/03/."),
    "keys": Param(None, type=["null", "array"], items={"type": "string"}, title="Keys (optional)",
                  description="Only these objects (full keys). Empty: every object of each prefix."),
    "glob": Param(None, type=["null", "string"], title="Glob (optional)",
                  description="Only keys matching this pattern, e.g. */app-7*.log. Empty: no filter."),
    "target": Param(None, type=["null", "string"], title="Target (optional)",
                    description="s3://BUCKET/PREFIX/ to restore under (each object keeps its full key "
                                "below it). Empty: back to the original bucket and keys."),
    "tier": Param("Standard", type="string", enum=["Expedited", "Standard", "Bulk"], title="Retrieval tier",
                  description="GLACIER: Expedited 1-5 min, Standard 3-5 h, Bulk 5-12 h. DEEP_ARCHIVE: "
                              "Standard within 12 h, Bulk within 48 h (Expedited falls back to Standard)."),
    "days": Param(7, type="integer", minimum=1, maximum=365, title="Days restored",
                  description="How long S3 keeps the restored copy of each archive."),
    "overwrite": Param(False, type=["boolean", "null"], title="Overwrite (optional)",
                       description="Replace objects that exist at the target with other content."),
}


def restore_dag(job: ArchiveJob) -> DAG:
    with DAG(
        dag_id=f"s3_restore__{job.name}",
        description=f"Restore archived days of s3://{job.source.bucket}/{job.source.key}{job.prefix_template} "
                    f"from {job.destination}",
        schedule=None,
        start_date=datetime.combine(job.start_date, datetime.min.time(), tzinfo=timezone.utc),
        catchup=False,
        params=PARAMS,
        render_template_as_native_obj=True,
        tags=["s3-archive", "restore"],
        doc_md=__doc__,
        default_args={"retries": 0},
    ) as dag:

        @task(task_id="plan", execution_timeout=timedelta(minutes=10))
        def plan_prefixes(params: dict) -> list[str]:
            from airflow.sdk import conf
            from airflow.sdk.exceptions import AirflowFailException

            from s3arch.errors import ArchiverError, BadArgument
            from s3arch.jobs import plan

            try:
                if not (params.get("prefixes") or params.get("date_from") or params.get("date_to")):
                    raise BadArgument("give a date range or prefixes to restore")
                prefixes = plan(job, date_from=params.get("date_from"), date_to=params.get("date_to"),
                                prefixes=params.get("prefixes"))
                if len(prefixes) > conf.getint("core", "max_map_length"):
                    raise BadArgument(f"{len(prefixes)} prefixes are more than one run maps",
                                      hint="restore a shorter range per run")
            except ArchiverError as exc:
                raise AirflowFailException(f"bad parameters, nothing was started: {exc}") from exc
            print(f"{len(prefixes)} prefix(es) to restore: {prefixes[0]}"
                  f"{' .. ' + prefixes[-1] if len(prefixes) > 1 else ''}")
            return prefixes

        planned = plan_prefixes()
        restored = S3RestoreArchiveOperator.partial(
            task_id="restore",
            source_bucket=job.source.bucket,
            destination=str(job.destination),
            target="{{ params.target }}",
            keys="{{ params['keys'] }}",
            glob="{{ params.glob }}",
            tier="{{ params.tier }}",
            days="{{ params.days }}",
            overwrite="{{ params.overwrite }}",
            memory_budget=job.memory_budget,
            poll_interval=job.restore_poll_seconds,
            expected_owner=job.expected_owner,
            execution_timeout=timedelta(hours=72),  # the deferred wait counts towards it
            **job_task_args(job),
        ).expand(prefix=planned)

        @task(task_id="report", trigger_rule=TriggerRule.ALL_DONE, execution_timeout=timedelta(minutes=10))
        def report(ti=None) -> list[dict]:
            from s3arch_airflow.report import RESTORE_COLUMNS, report_run

            return report_run(ti, task_id="restore", rows_key=RESTORE_ROWS_XCOM_KEY, columns=RESTORE_COLUMNS)

        restored >> report()
    return dag


for _job in load_jobs(JOBS_FILE).values():
    globals()[f"s3_restore__{_job.name}"] = restore_dag(_job)

"""Archive DAGs: one per job in the jobs file (docs/JOBS.md), named ``s3_archive__<job>``.

Each run plans its prefixes (the logical date minus the job's age for scheduled runs and
backfills; a date range or explicit prefixes from the trigger form), archives one mapped
task per prefix, then reports. For a job with ``segments`` > 1, prefixes above its threshold
are archived by a ``prepare`` task, ``segments`` mapped ``segment`` tasks named
``<prefix> [k/N]`` that may run on any worker, and an ``assemble`` task. On-call re-runs one prefix by clearing its mapped task in the
UI, or by triggering with ``{"prefixes": ["<prefix>"]}``; a prefix already archived is skipped
unless ``overwrite`` is set.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone
from pathlib import Path

from airflow.sdk import DAG, AssetAlias, Param, TaskGroup, TriggerRule, task
from s3arch_airflow.operators import (ROWS_XCOM_KEY, S3ArchivePrefixOperator, S3ArchiveSegmentOperator,
                                     S3AssembleSegmentsOperator, S3PrepareSegmentsOperator)
from s3arch_airflow.report import job_task_args

from s3arch.jobs import ArchiveJob, load_jobs

JOBS_FILE = Path(os.environ.get("S3ARCH_JOBS_FILE") or Path(__file__).with_name("archive_jobs.yaml"))

PARAMS = {
    "date_from": Param(None, type=["null", "string"], format="date", title="First date",
                       description="Archive a range of days: first day (YYYY-MM-DD). Leave both "
                                   "dates empty to archive the run's logical date minus the job's age."),
    "date_to": Param(None, type=["null", "string"], format="date", title="Last date",
                     description="Last day of the range, inclusive (YYYY-MM-DD)."),
    "prefixes": Param(None, type=["null", "array"], items={"type": "string"}, title="Prefixes (optional, on-call)",
                      description="Exact prefixes to archive, one per line, e.g. logs/2026/11/03/. "
                                  "Overrides the dates."),
    "overwrite": Param(False, type=["boolean", "null"], title="Overwrite (optional)",
                       description="Re-archive prefixes that already have a complete archive."),
    "dry_run": Param(False, type=["boolean", "null"], title="Dry run (optional)",
                     description="List and estimate only; write nothing."),
}


def archive_dag(job: ArchiveJob) -> DAG:
    with DAG(
        dag_id=f"s3_archive__{job.name}",
        description=job.description or f"Archive s3://{job.source.bucket}/{job.source.key}"
                                       f"{job.prefix_template} into {job.destination}",
        schedule=job.schedule,
        start_date=datetime.combine(job.start_date, datetime.min.time(), tzinfo=timezone.utc),
        catchup=job.catchup,
        max_active_runs=4,
        params=PARAMS,
        render_template_as_native_obj=True,
        tags=["s3-archive"],
        doc_md=__doc__,
        default_args={"retries": 0},
    ) as dag:

        @task(task_id="plan", execution_timeout=timedelta(minutes=10))
        def plan_prefixes(params: dict, dag_run=None, logical_date=None) -> list[list[str]]:
            from airflow.sdk import conf
            from airflow.sdk.exceptions import AirflowFailException

            from s3arch.errors import ArchiverError
            from s3arch.jobs import batches, plan

            reference = logical_date or dag_run.run_after
            try:
                prefixes = plan(job, date_from=params.get("date_from"), date_to=params.get("date_to"),
                                prefixes=params.get("prefixes"), logical_date=reference.date())
            except ArchiverError as exc:
                raise AirflowFailException(f"bad parameters, nothing was started: {exc}") from exc
            planned = batches(prefixes, conf.getint("core", "max_map_length"))
            print(f"{len(prefixes)} prefix(es) in {len(planned)} task(s): "
                  f"{prefixes[0]}{' .. ' + prefixes[-1] if len(prefixes) > 1 else ''}")
            return planned

        planned = plan_prefixes()

        # The graph shows plan -> size -> archive | prepare -> segment -> assemble -> report:
        # Airflow maps only over a task's whole return value, so the three lists the sizing
        # makes are handed out by three one-line tasks folded into the size group.
        with TaskGroup("size", tooltip="Which prefixes are large enough for segment tasks"):
            @task(task_id="measure", execution_timeout=timedelta(minutes=30))
            def size_prefixes(planned: list[list[str]]) -> dict:
                """Large prefixes go to segment tasks: each prefix is listed up to the job's
                threshold (no listing at all for a job without segments)."""
                from airflow.providers.amazon.aws.hooks.s3 import S3Hook
                from s3arch_airflow.operators import engine_clients

                from s3arch.jobs import split_by_size

                control = engine_clients(S3Hook(aws_conn_id=job.aws_conn_id),
                                         job.expected_owner).control if job.segments > 1 else None
                split = split_by_size(job, planned, control)
                for size in split["sizes"]:
                    print(f"{size['prefix']}: {'at least ' if not size['complete'] else ''}{size['objects']:,} "
                          f"objects, {size['bytes']:,} bytes ({size['requests']} LIST requests, "
                          f"{size['seconds']:.2f}s)")
                if split["large"]:
                    print(f"{len(split['large'])} prefix(es) in {job.segments} segments each: "
                          f"{', '.join(split['large'])}")
                return split

            sized = size_prefixes(planned)

            @task(task_id="small")
            def small_prefixes(split: dict) -> list[list[str]]:
                return split["batches"]

            @task(task_id="large")
            def large_prefixes(split: dict) -> list[str]:
                return split["large"]

            @task(task_id="segments")
            def segment_tasks(split: dict) -> list[dict]:
                return split["segments"]

            small, large, segment_kwargs = small_prefixes(sized), large_prefixes(sized), segment_tasks(sized)

        # What every step of this job shares; each operator takes only its own on top.
        step = dict(
            source_bucket=job.source.bucket,
            destination=str(job.destination),
            storage_class=job.storage_class,
            codec=job.codec,
            level=job.level,
            memory_budget=job.memory_budget,
            overwrite="{{ params.overwrite }}",
            preview="{{ params.dry_run }}",
            lease_ttl=job.lease_ttl_seconds,
            prices=job.prices,
            spec_options=job.spec_options,
            execution_timeout=timedelta(minutes=job.execution_timeout_minutes),
            **job_task_args(job),
        )
        deleting = dict(delete_source=job.delete_source, delete_versions=job.delete_versions)
        outlets = [AssetAlias(f"s3_archive__{job.name}")]  # one asset event per archive made

        archived = S3ArchivePrefixOperator.partial(
            task_id="archive", outlets=outlets, allow_empty=job.allow_empty, **deleting, **step).expand(prefix=small)
        prepared = S3PrepareSegmentsOperator.partial(task_id="prepare", segments=job.segments, **step).expand(
            prefix=large)
        segmented = S3ArchiveSegmentOperator.partial(task_id="segment", **step).expand_kwargs(segment_kwargs)
        # all_done: each assembly checks its own segments, so one prefix's failed segment
        # does not hold back the others' assemblies.
        assembled = S3AssembleSegmentsOperator.partial(
            task_id="assemble", outlets=outlets, segments=job.segments, trigger_rule=TriggerRule.ALL_DONE,
            **deleting, **step).expand(prefix=large)
        prepared >> segmented >> assembled

        @task(task_id="report", trigger_rule=TriggerRule.ALL_DONE, execution_timeout=timedelta(minutes=10))
        def report(ti=None) -> list[dict]:
            from s3arch_airflow.report import report_run

            return report_run(ti, task_id="archive", rows_key=ROWS_XCOM_KEY, segmented_task_id="assemble")

        [archived, assembled] >> report()
    return dag


for _job in load_jobs(JOBS_FILE).values():
    globals()[f"s3_archive__{_job.name}"] = archive_dag(_job)

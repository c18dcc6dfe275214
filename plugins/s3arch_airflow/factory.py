"""The DAG factory: one archive DAG (``s3_archive__<job>``) and one restore DAG
(``s3_restore__<job>``) per job of a jobs file (docs/JOBS.md).

A DAG file in the DAGs folder needs only::

    from s3arch_airflow.factory import archive_dags, restore_dags

    globals().update(archive_dags("/path/to/archive_jobs.yaml"))
    globals().update(restore_dags("/path/to/archive_jobs.yaml"))

The DAGs must land in the DAG file's globals: that is where Airflow's DagBag finds them and
what it records as their file. ``S3ARCH_JOBS_FILE``, when set, names the jobs file instead of
the path given.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone
from pathlib import Path

from airflow.sdk import DAG, AssetAlias, Param, TriggerRule, task

from s3arch.core.options import Form, Option, form_options
from s3arch.ops.archive_job import ArchiveJob
from s3arch.ops.jobs import load_jobs
from s3arch_airflow.operators import (S3ArchivePrefixOperator, S3ArchiveSegmentOperator, S3AssembleSegmentsOperator,
                                      S3PrepareSegmentsOperator)
from s3arch_airflow.task_rows import ROWS_XCOM_KEY
from s3arch_airflow.plan_task import S3PlanArchiveOperator
from s3arch_airflow.report import job_retry_args, job_task_args
from s3arch_airflow.restore import RESTORE_ROWS_XCOM_KEY, S3RestoreArchiveOperator

JOBS_FILE_ENV = "S3ARCH_JOBS_FILE"

ARCHIVE_DOC = """Archive DAGs: one per job in the jobs file (docs/JOBS.md), named ``s3_archive__<job>``.

Each run plans its prefixes (the logical date minus the job's age for scheduled runs and
backfills; a date range or explicit prefixes from the trigger form), archives them in mapped
tasks (one per prefix; a range longer than a month shares 32 tasks, consecutive days each),
then reports. For a job with ``segments`` > 1, a ``size`` task lists each prefix up to its
threshold; the large ones are archived by a ``prepare`` task, ``segments`` mapped ``segment``
tasks named ``<prefix> [k/N]`` that may run on any worker, and an ``assemble`` task. A run of
one day (scheduled, or one of a Backfill's) is archived by its ``plan`` task, unless large enough
for segment tasks; on-call re-runs it by clearing ``plan``. On-call
re-runs a prefix of a range by clearing its mapped task in the UI (a task of several days re-runs only
those not archived yet), or by triggering with ``{"prefixes": ["<prefix>"]}``; a prefix
already archived is skipped unless ``overwrite`` is set.
"""

RESTORE_DOC = """Restore DAGs: one per job in the jobs file (docs/RESTORE.md), named ``s3_restore__<job>``.

Triggered by hand (no schedule) with a form: a date range or exact prefixes, optionally only
some keys or a glob, a target (another bucket/prefix, or empty for the original location), the
restore tier and how many days the restored copy stays. It plans one mapped task per archived
prefix: request the restore, **defer** on the triggerer until S3 has restored the archive (no
worker is held during the hours that takes), then extract by ranged GETs. A report lists per
prefix the objects restored, bytes, already present, and failures.
"""


def jobs_file(default: str | os.PathLike | None = None) -> Path:
    """The jobs file a DAG file means: ``$S3ARCH_JOBS_FILE`` if set, else ``default``."""
    chosen = os.environ.get(JOBS_FILE_ENV) or default
    if not chosen:
        raise ValueError(f"no jobs file: pass its path to the factory or set {JOBS_FILE_ENV}")
    return Path(chosen)


def archive_dags(path: str | os.PathLike | None = None) -> dict[str, DAG]:
    """``{dag_id: DAG}``: the archive DAG of every job in the jobs file (see ``jobs_file``)."""
    return {dag.dag_id: dag for dag in map(archive_dag, load_jobs(jobs_file(path)).values())}


def restore_dags(path: str | os.PathLike | None = None) -> dict[str, DAG]:
    """``{dag_id: DAG}``: the restore DAG of every job in the jobs file (see ``jobs_file``)."""
    return {dag.dag_id: dag for dag in map(restore_dag, load_jobs(jobs_file(path)).values())}


# What the archive form asks first; its other fields are the archive steps' options that have
# a form (``archive_params``).
ARCHIVE_PLAN_PARAMS = {
    "date_from": Param(None, type=["null", "string"], format="date", title="First date",
                       description="Archive a range of days: first day (YYYY-MM-DD). Leave both "
                                   "dates empty to archive the run's logical date minus the job's age."),
    "date_to": Param(None, type=["null", "string"], format="date", title="Last date",
                     description="Last day of the range, inclusive (YYYY-MM-DD)."),
    "prefixes": Param(None, type=["null", "array"], items={"type": "string"}, title="Prefixes (optional, on-call)",
                      description="Exact prefixes to archive, one per line, e.g. logs/2026/11/03/. "
                                  "Give either these or the dates, not both."),
}


def archive_params() -> dict[str, Param]:
    """The archive DAG's trigger form: the range or prefixes, then the field of each archive
    step option with a ``form`` (tasks/core/options.py: ``overwrite``, ``dry_run``)."""
    return {**ARCHIVE_PLAN_PARAMS, **{o.name: form_param(o, o.form) for o in form_options("archive") if o.form}}


def archive_step_options(job: ArchiveJob) -> dict:
    """Every archive step's ``options``: the job's settings (by the names the job and the CLI
    use), and each field of the trigger form as the run's param of its name (rendered)."""
    return {**job.operator_args, **{o.name: f"{{{{ params.{o.name} }}}}" for o in form_options("archive")}}


def archive_dag(job: ArchiveJob) -> DAG:
    with DAG(
        dag_id=f"s3_archive__{job.name}",
        description=job.description or f"Archive s3://{job.source.bucket}/{job.source.key}"
                                       f"{job.prefix_template} into {job.destination}",
        schedule=job.schedule,
        start_date=datetime.combine(job.start_date, datetime.min.time(), tzinfo=timezone.utc),
        catchup=job.catchup,
        max_active_runs=4,
        params=archive_params(),
        render_template_as_native_obj=True,
        tags=["s3-archive"],
        doc_md=ARCHIVE_DOC,
        default_args={"retries": 0},
    ) as dag:

        # What every step of this job shares; each operator takes only its own on top.
        step = dict(
            source_bucket=job.source.bucket,
            destination=str(job.destination),
            options=archive_step_options(job),
            execution_timeout=timedelta(minutes=job.execution_timeout_minutes),
            **job_task_args(job),
        )
        deleting = dict(delete_source=job.delete_source, delete_versions=job.delete_versions)
        outlets = [AssetAlias(f"s3_archive__{job.name}")]  # one asset event per archive made
        # A run of one day is archived by its plan task (s3arch_airflow/plan_task.py).
        planned = S3PlanArchiveOperator(task_id="plan", job=job, outlets=outlets, **deleting,
                                        **{**step, "map_index_template": None}).output

        # A job with segment tasks sizes the planned prefixes; its archive tasks leave the
        # large ones to the segment tasks.
        assembled, large = segment_path(job, planned, step, deleting, outlets) if job.segment_tasks else (None, None)
        archived = S3ArchivePrefixOperator.partial(
            task_id="archive", outlets=outlets, allow_empty=job.allow_empty, segmented=large, **deleting,
            **step).expand(prefix=planned)

        @task(task_id="report", trigger_rule=TriggerRule.ALL_DONE, execution_timeout=timedelta(minutes=10))
        def report(ti=None) -> list[dict]:
            from s3arch_airflow.report import report_run

            return report_run(ti, task_id="archive", rows_key=ROWS_XCOM_KEY,
                              segmented_task_id="assemble" if job.segment_tasks else None)

        [archived, *([assembled] if assembled else [])] >> report()
    return dag


def segment_path(job: ArchiveJob, planned, step: dict, deleting: dict, outlets: list):
    """The large prefixes of a job with segment tasks: sized, then each prepared, produced as
    ``job.segments`` segment tasks on any workers, and assembled. Returns the assemble task and
    the size task's result (the large prefixes)."""

    @task(task_id="size", execution_timeout=timedelta(minutes=30), **job_retry_args(job))
    def size_prefixes(planned: list[list[str]], ti=None, params=None) -> list[str]:
        """Each prefix is sized from the job's inventory report, or listed up to the job's
        threshold: the large ones go to segment tasks, and (but in a dry run) the pages listed
        to their prepare tasks, which list only the keys after them. A day the plan task sized
        (a run of one day) is not listed again. Retried as the archive tasks are: only what
        another try can help."""
        from s3arch_airflow.hooks import S3ArchHook, failing_task
        from s3arch_airflow.sizing import SIZED_XCOM_KEY

        from s3arch.core.options import as_switch
        from s3arch.ops.sizing import split_by_size
        from s3arch.produce.segments.sized import hand_off_for

        split = ti.xcom_pull(task_ids="plan", key=SIZED_XCOM_KEY)
        if split is None or [s["prefix"] for s in split["sizes"]] != [p for batch in planned for p in batch]:
            with failing_task("sizing the prefixes"):
                store = S3ArchHook.for_job(job).engine_clients().store
                split = split_by_size(job, planned, store, None if as_switch((params or {}).get("dry_run"))
                                      else hand_off_for(job.spec_for, store))
        else:
            print("sized by the plan task:")
        ti.xcom_push(key=SIZED_XCOM_KEY, value=split)
        for size in split["sizes"]:
            print(f"{size['prefix']}: {'at least ' if not size['complete'] else ''}{size['objects']:,} "
                  f"objects, {size['bytes']:,} bytes (from the {size['source']}: {size['requests']} LIST requests, "
                  f"{size['seconds']:.2f}s)")
        if "inventory" in split:
            print(f"inventory report {split['inventory']['report']} sized {split['inventory']['days']} day(s)")
        if split["large"]:
            print(f"{len(split['large'])} prefix(es) in {job.segment_tasks} segments each: {', '.join(split['large'])}")
        return split["large"]

    large = size_prefixes(planned)  # an XComArg, resolved at run time
    prepared = S3PrepareSegmentsOperator.partial(task_id="prepare", segments=job.segment_tasks, **step).expand(
        prefix=large)
    # all_done, here and for the assemblies: Airflow cannot make segment task i wait for
    # prepare task i alone (a mapped task depends on every instance of a mapped upstream),
    # so each segment task checks its own prefix's plan instead. A prefix whose prepare
    # failed has no plan: its segment tasks fail saying so, the other prefixes' archive.
    segmented = S3ArchiveSegmentOperator.partial(
        task_id="segment", segments=job.segment_tasks, trigger_rule=TriggerRule.ALL_DONE, **step).expand(
        prefix=large, segment=list(range(job.segment_tasks)))
    # all_done: each assembly checks its own segments, so one prefix's failed segment
    # does not hold back the others' assemblies.
    assembled = S3AssembleSegmentsOperator.partial(
        task_id="assemble", outlets=outlets, segments=job.segment_tasks, trigger_rule=TriggerRule.ALL_DONE,
        **deleting, **step).expand(prefix=large)
    prepared >> segmented >> assembled
    return assembled, large


# What the restore form asks first; its other fields are the restore operator's options.
RESTORE_PLAN_PARAMS = {
    "date_from": Param(None, type=["null", "string"], format="date", title="First date",
                       description="Restore a range of archived days: first day (YYYY-MM-DD)."),
    "date_to": Param(None, type=["null", "string"], format="date", title="Last date",
                     description="Last day of the range, inclusive (YYYY-MM-DD)."),
    "prefixes": Param(None, type=["null", "array"], items={"type": "string"}, title="Prefixes (optional)",
                      description="Exact archived prefixes instead of dates, e.g. logs/2026/11/03/."),
}
_JSON_TYPES: dict[object, str] = {int: "integer", float: "number"}


def form_param(option: Option, form: Form) -> Param:
    """The trigger form's field of an option (tasks/core/options.py; the archive and the restore
    DAG's alike): its default, type and choices are the option's; title, description and bounds
    its ``form``'s."""
    optional = option.default is None or option.switch
    json_type = "array" if option.nargs else _JSON_TYPES.get(option.flag_type, "string")
    kind: str | list[str] = ["boolean", "null"] if option.switch else ["null", json_type] if optional else json_type
    schema = dict(type=kind, title=form.title + (" (optional)" if optional else ""),
                  **({"items": {"type": "string"}} if option.nargs else {}),
                  **({"enum": list(option.choices)} if option.choices else {}), **form.bounds)
    return Param(option.default, description=form.description, **schema)


def restore_params() -> dict[str, Param]:
    """The restore DAG's trigger form: the range or prefixes, then each restore option's field."""
    return {**RESTORE_PLAN_PARAMS, **{o.name: form_param(o, o.form) for o in form_options() if o.form}}


def restore_options(job: ArchiveJob) -> dict:
    """The restore task's ``options``: the job's value of each option the restore operator takes
    that is a job key (``poll_interval``, ``memory_budget``, ``expected_owner``), and each field
    of the restore form as the run's param of its name (rendered)."""
    from s3arch_airflow.operator_options import RESTORE

    return {**{name: job.options[name] for name, o in RESTORE.options().items() if o.job == "key"},
            **{o.name: f"{{{{ params[{o.name!r}] }}}}" for o in form_options()}}


def restore_prefixes(job: ArchiveJob, params: dict) -> list[str]:
    """The restore DAG's ``plan`` task: the archived prefixes its form names (a date range or
    exact prefixes; a split job's day as its archives), at most what one run maps. A bad
    parameter fails the task without retries, before anything is started."""
    from s3arch_airflow.compat import conf

    from s3arch.core.errors import BadArgument
    from s3arch.ops.planning import plan
    from s3arch_airflow.failures import fail_task
    from s3arch_airflow.hooks import S3ArchHook

    try:
        if not (params.get("prefixes") or params.get("date_from") or params.get("date_to")):
            raise BadArgument("give a date range or prefixes to restore")
        prefixes = plan(job, date_from=params.get("date_from"), date_to=params.get("date_to"),
                        prefixes=params.get("prefixes"))
        if job.split_by:  # the day's archives, listed as the restore role may
            prefixes = job.split_archived(S3ArchHook.for_job(job, "restore").engine_clients().store, prefixes)
        if len(prefixes) > conf.getint("core", "max_map_length"):
            raise BadArgument(f"{len(prefixes)} prefixes are more than one run maps",
                              hint="restore a shorter range per run")
    except BaseException as exc:
        fail_task("bad parameters, nothing was started", exc)
    print(f"{len(prefixes)} prefix(es) to restore: {prefixes[0]}"
          f"{' .. ' + prefixes[-1] if len(prefixes) > 1 else ''}")
    return prefixes

def restore_dag(job: ArchiveJob) -> DAG:
    with DAG(
        dag_id=f"s3_restore__{job.name}",
        description=f"Restore archived days of s3://{job.source.bucket}/{job.source.key}{job.prefix_template} "
                    f"from {job.destination}",
        schedule=None,
        start_date=datetime.combine(job.start_date, datetime.min.time(), tzinfo=timezone.utc),
        catchup=False,
        params=restore_params(),
        render_template_as_native_obj=True,
        tags=["s3-archive", "restore"],
        doc_md=RESTORE_DOC,
        default_args={"retries": 0},
    ) as dag:

        @task(task_id="plan", execution_timeout=timedelta(minutes=10))
        def plan_prefixes(params: dict) -> list[str]:
            return restore_prefixes(job, params)

        planned = plan_prefixes()  # type: ignore[call-arg, misc]  # params come from the context
        restored = S3RestoreArchiveOperator.partial(
            task_id="restore",
            source_bucket=job.source.bucket,
            destination=str(job.destination),
            options=restore_options(job),  # the job's restore settings and the form's fields
            execution_timeout=timedelta(hours=72),  # the deferred wait counts towards it
            **job_task_args(job, "restore"),
        ).expand(prefix=planned)

        @task(task_id="report", trigger_rule=TriggerRule.ALL_DONE, execution_timeout=timedelta(minutes=10))
        def report(ti=None) -> list[dict]:
            from s3arch_airflow.report import RESTORE_COLUMNS, report_run

            return report_run(ti, task_id="restore", rows_key=RESTORE_ROWS_XCOM_KEY, columns=RESTORE_COLUMNS)

        restored >> report()
    return dag



def scrub_dags(path: str | os.PathLike | None = None) -> dict[str, DAG]:
    """``{dag_id: DAG}``: the scrub DAG of every job in the jobs file (``s3_scrub__<job>``,
    s3arch_airflow.scrub_dag, docs/CATALOG.md)."""
    from s3arch_airflow.scrub_dag import scrub_dag

    return {dag.dag_id: dag for dag in map(scrub_dag, load_jobs(jobs_file(path)).values())}

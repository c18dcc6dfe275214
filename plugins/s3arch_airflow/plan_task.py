"""The archive DAG's ``plan`` task: which prefixes a run archives, in batches for the mapped
``archive`` tasks; and, for a run of one day, the archive itself.

A scheduled run or a Backfill's run (one logical date, no range or prefixes in the form) plans
one day. Handing that day to a mapped ``archive`` task (and, for a job with segment tasks, to a
``size`` task first) and a ``report`` task cost three or four more task instances per day: each
a worker slot, a task process and a DAG parse, queued behind the other runs' for the slots. So
the plan task of such a run archives the day itself, logs the report's table and skips every
task after it, ``report`` too; if the day fails, ``report`` runs and fails the run as in any
run. On-call clears the ``plan`` task (with its downstream, the UI's default) to run the day
again. A day large enough for segment tasks still goes to them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from s3arch_airflow.operators import S3ArchivePrefixOperator
from s3arch_airflow.report import print_report
from s3arch_airflow.sizing import SIZED_XCOM_KEY

if TYPE_CHECKING:
    from airflow.sdk import Context

    from s3arch.ops.archive_job import ArchiveJob

# The trigger form's fields that make a run more than its logical date's day.
RANGE_PARAMS = ("date_from", "date_to", "prefixes")


class S3PlanArchiveOperator(S3ArchivePrefixOperator):
    """Plan the run's prefixes (``job``'s plan for the form's parameters or the logical date)
    and return them in batches, one per mapped ``archive`` task. A run of one logical date that
    plans one prefix, not large enough for segment tasks, is archived here (the same archive
    step as the ``archive`` task's, pushing its row as ``archive_rows``); archived, its report
    is logged here and the tasks after this one are skipped."""

    ui_color = "#f0f4ff"

    def __init__(self, *, job: ArchiveJob, **kwargs):
        super().__init__(prefix=[], allow_empty=job.allow_empty, **kwargs)
        self.job = job

    def execute(self, context: Context) -> list:  # the batches, where the archive task returns rows
        from s3arch_airflow.compat import DownstreamTasksSkipped

        params = context["params"]
        # A run triggered without a logical date (the form, the REST API) has none in its context.
        planned = planned_batches(self.job, params, context.get("logical_date") or context["dag_run"].run_after)
        if any(params.get(name) for name in RANGE_PARAMS) or len(planned) != 1 or len(planned[0]) != 1:
            return planned
        self.prefix = planned[0][0]  # the label and lineage name the day archived here
        if self.job.segment_tasks:
            split = self._sized(self.prefix)
            if split["large"]:
                context["ti"].xcom_push(key=SIZED_XCOM_KEY, value=split)
                return planned
        # Pushed first: the report finds the plan even if the archive below fails.
        context["ti"].xcom_push(key="return_value", value=planned)
        rows = self._run_each(context, [self.prefix], lambda clients, prefix: self._archive(clients, prefix, context))
        print_report(rows)  # archived: a failed day raised above, and ``report`` fails the run
        stood_in_for = sorted(self.get_flat_relative_ids(upstream=False))
        self.log.info("%s archived by the plan task: %s skipped", self.prefix, ", ".join(stood_in_for))
        raise DownstreamTasksSkipped(tasks=stood_in_for)

    def _sized(self, prefix: str) -> dict:
        """The day sized as ``size`` sizes it (``split_by_size``: listed up to the job's
        threshold): large, it is for segment tasks, and (but in a dry run) the pages listed are
        written for its prepare task, which lists only the keys after them."""
        from s3arch.ops.sizing import split_by_size
        from s3arch.produce.segments.sized import hand_off_for
        from s3arch_airflow.failures import fail_task

        try:
            store = self.hook.engine_clients().store
            return split_by_size(self.job, [[prefix]], store,
                                 None if self._spec(prefix).dry_run else hand_off_for(self._spec, store))
        except BaseException as exc:
            fail_task("sizing the day", exc)


def planned_batches(job: ArchiveJob, params: dict, reference) -> list[list[str]]:
    """The run's prefixes in batches of consecutive days, one per mapped ``archive`` task;
    bad parameters fail the task before anything starts, without a retry."""
    from s3arch_airflow.compat import conf

    from s3arch.ops.planning import archive_batches, plan
    from s3arch_airflow.failures import fail_task

    try:
        prefixes = plan(job, date_from=params.get("date_from"), date_to=params.get("date_to"),
                        prefixes=params.get("prefixes"), logical_date=reference.date())
    except BaseException as exc:
        fail_task("bad parameters, nothing was started", exc)
    if job.split_by:  # one task per value of the split wildcard (an account's day, say)
        prefixes = split_source_names(job, prefixes)
    planned = archive_batches(prefixes, conf.getint("core", "max_map_length"))
    print(f"{len(prefixes)} prefix(es) in {len(planned)} task(s): "
          f"{prefixes[0]}{' .. ' + prefixes[-1] if len(prefixes) > 1 else ''}")
    return planned


def split_source_names(job: ArchiveJob, names: list[str]) -> list[str]:
    """A split job's day names, one per value of its ``split_by`` wildcard (delimiter LISTs
    of the source bucket); a pattern that matches nothing fails the run before any task."""
    from s3arch_airflow.hooks import S3ArchHook, failing_task

    with failing_task("nothing was started"):
        return job.split(S3ArchHook.for_job(job).engine_clients().store, names)

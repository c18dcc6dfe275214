"""S3RestoreArchiveOperator: restore one archived prefix from Glacier and extract it.

Requests the restore of the prefix's archive (never of its manifest), then **defers** to
``ArchiveRestoredTrigger`` until S3 has restored it, so no worker slot is held for the hours a
Standard or Bulk restore takes; an archive that needs no restore (STANDARD, GLACIER_IR) skips
the wait. Then it extracts all objects, the given keys, or those matching a glob, to the
target (``s3://BUCKET/PREFIX/``, each object under its full original key; empty: back to the
source bucket itself), and returns one result row. ``on_kill`` (the task marked failed, cleared
or timed out) stops the extract before its next object or part and aborts the multipart uploads
it started, within the seconds before Airflow's SIGKILL.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.providers.amazon.aws.operators.base_aws import AwsBaseOperator
from airflow.providers.amazon.aws.utils.mixins import aws_template_fields

from s3arch.core.options import as_switch
from s3arch_airflow.hooks import S3ArchHook
from s3arch_airflow.operator_options import (RESTORE, checked_options, known_options, moved_into_options,
                                             rendered_options)
from s3arch_airflow.task_rows import result_row
from s3arch_airflow.task_stops import KILLED

if TYPE_CHECKING:
    from airflow.sdk import Context

    from s3arch.core.stops import Cancel

RESTORE_ROWS_XCOM_KEY = "restore_rows"


class S3RestoreArchiveOperator(AwsBaseOperator[S3ArchHook]):
    """Restore and extract one archived ``prefix`` (see the module's doc).

    :param source_bucket: the bucket the job archives from (and restores to, without a ``target``)
    :param prefix: the archived prefix to restore (templated)
    :param destination: ``s3://BUCKET/PREFIX/`` the job's archives are under
    :param options: the restore options (operator_options.py), by the names ``s3arch restore``
        and ``s3arch extract`` use with ``_`` for ``-`` (tasks/core/options.py): ``tier``,
        ``days``, ``poll_interval`` (seconds between HEADs while waiting; the job key of the
        same name; default by tier), ``wait_timeout`` (seconds before the wait gives up, default
        48 h; the task then fails retryably, as ``restore --wait`` exits 3: the restore goes on
        in S3), ``overwrite``; ``keys`` and ``glob`` select objects, ``target`` is
        ``s3://BUCKET/PREFIX/`` (empty: back to the source bucket); and the job keys
        ``memory_budget`` and ``expected_owner`` (ExpectedBucketOwner on every request,
        docs/SECURITY.md). E.g. ``{"target": "s3://scratch/restored/", "tier": "Bulk"}``.
        Templated, as a whole, and each value checked as the table says once rendered; an
        unknown key is a TypeError naming the known ones; left out, an option has the table's
        default.
    :param deferrable: wait for S3's restore in the triggerer (the default), not in a worker slot
    :param aws_conn_id: and ``region_name``, ``verify``, ``botocore_config``: as on every
        amazon-provider operator

    The options given as keyword arguments of their names (the spelling of 0.6) still work for
    one release, with a ``DeprecationWarning`` naming ``options={...}``."""

    aws_hook_class = S3ArchHook
    template_fields: Sequence[str] = aws_template_fields("prefix", "options")
    template_fields_renderers = {"options": "json"}
    ui_color = "#fff3e0"

    def __init__(self, *, source_bucket: str, prefix: str, destination: str,
                 options: Mapping[str, Any] | None = None, deferrable: bool = True, **kwargs):
        name = type(self).__name__
        options = moved_into_options(name, options, kwargs, RESTORE)  # the old spellings, with a warning
        super().__init__(**kwargs)
        self.source_bucket = source_bucket
        self.prefix = prefix
        self.destination = destination
        self.options = checked_options(name, {} if options is None else options, RESTORE)
        self.deferrable = deferrable
        self._cancel: Cancel | None = None  # the try's, made when it starts (``execute``)

    @classmethod
    def partial(cls, **kwargs):
        """``BaseOperator.partial``, where the old spellings of the options work as in the
        constructor (moved into ``options``, with the warning)."""
        options = moved_into_options(cls.__name__, kwargs.pop("options", None), kwargs, RESTORE)
        if options is not None:
            kwargs["options"] = checked_options(cls.__name__, options, RESTORE)
        return super().partial(**kwargs)

    @staticmethod
    def option_names() -> tuple[str, ...]:
        """The keys ``options`` takes: the table's restore options, ``memory_budget`` and
        ``expected_owner``."""
        return known_options(RESTORE)

    def values(self) -> dict[str, Any]:
        """This task's options (rendered, at run time): each given one checked as the option
        table says (an account's digits that native rendering made a number are its text
        again), the others at the table's default."""
        return rendered_options(type(self).__name__, self.options, RESTORE)

    @property
    def _hook_parameters(self) -> dict[str, Any]:
        return {**super()._hook_parameters, "expected_owner": self.values()["expected_owner"]}

    def on_kill(self) -> None:
        # Airflow calls it in its SIGTERM handler: Cancel.set only records and sets.
        self.log.warning("task killed: cancelling the extract of %s; the multipart uploads it started are aborted",
                         self.prefix)
        if self._cancel is not None:
            self._cancel.set(KILLED)

    @property
    def label(self) -> str:
        return self.prefix

    def _layout(self):
        from s3arch.core.config import S3Url
        from s3arch.format.manifest import layout_for

        return layout_for(S3Url(self.source_bucket, self.prefix), S3Url.parse(self.destination))

    def execute(self, context: Context) -> dict:
        from s3arch.stored.days import committed_parts
        from s3arch.core.errors import BadArgument
        from s3arch.core.stops import Cancel
        from s3arch.restore.glacier import POLL_SECONDS, request_restore, wait_restored

        if self._cancel is None:  # the try's: a kill while the restore is asked for stops the extract at once
            self._cancel = Cancel()
        values = self._guard(context, self.values)
        tier = values["tier"]

        def restore():
            """Every part of the day is asked for; the first not yet readable is waited for
            (a wait that ends comes back here, and the others are asked again)."""
            layout = self._layout()
            clients = self.hook.engine_clients()
            parts = committed_parts(clients.store, layout)
            if not parts:
                raise BadArgument(f"{self.prefix} has no committed archive ({layout.manifest_url} does not exist)",
                                  hint="archive it first, or check the dates")
            waiting = []
            for part in parts:
                state = request_restore(clients.store, layout.bucket, part.committed.archive_key, tier=tier,
                                        days=int(values["days"]),
                                        fallback_tier="Standard" if tier == "Expedited" else None,
                                        restore_store=clients.single_attempt_store)
                self.log.info("%s (%s)", state.line(), state.requested)
                waiting += [] if state.readable else [(part.committed, state)]
            return clients, layout, waiting

        clients, layout, waiting = self._guard(context, restore)
        if not waiting:
            return self._extract(context, clients, layout, values)
        committed, state = waiting[0]
        interval = values["poll_interval"] or POLL_SECONDS[state.tier or tier]
        if self.deferrable:
            from s3arch_airflow.triggers import ArchiveRestoredTrigger

            self.defer(trigger=ArchiveRestoredTrigger(bucket=layout.bucket, key=committed.archive_key,
                                                      aws_conn_id=self.aws_conn_id, region_name=self.region_name,
                                                      verify=self.verify, botocore_config=self.botocore_config,
                                                      poll_interval=interval,
                                                      deadline=time.time() + values["wait_timeout"],
                                                      expected_owner=clients.expected_owner),  # "self" resolved
                       method_name="execute_complete")
        self._guard(context, lambda: wait_restored(clients.store, layout.bucket, committed.archive_key,
                                                   timeout=values["wait_timeout"], interval=interval))
        return self.execute(context)

    def execute_complete(self, context: Context, event: dict[str, Any] | None) -> dict:
        from s3arch_airflow.failures import task_error
        from s3arch_airflow.triggers import event_failure

        if event is None or event.get("status") != "restored":
            failure = event_failure(event)
            row = result_row(self.prefix, "failed", error=failure.message, retryable=failure.retryable)
            context["ti"].xcom_push(key=RESTORE_ROWS_XCOM_KEY, value=[row])
            raise task_error(self.prefix, failure)
        self.log.info("%s is restored until %s", event["archive"], event.get("expiry"))
        return self.execute(context)  # the day's other parts, if any, then the extract

    def _extract(self, context: Context, clients, layout, values: dict[str, Any]) -> dict:
        from s3arch.core.config import S3Url
        from s3arch.restore.days import extract_day_to_s3
        from s3arch.restore.extract import Selection

        target = S3Url.parse(values["target"]) if values["target"] else S3Url(self.source_bucket, "")
        keys = None
        if values["keys"]:  # a key list spans the run's prefixes: each task takes its own
            keys = [k for k in values["keys"] if k.startswith(self.prefix)]
            if not keys:
                row = result_row(self.prefix, "skipped", error="none of the requested keys is in this prefix")
                context["ti"].xcom_push(key=RESTORE_ROWS_XCOM_KEY, value=[row])
                return row
        started = time.monotonic()
        result = self._guard(context, lambda: extract_day_to_s3(
            clients, layout, target, selection=Selection.of(keys, values["glob"] or None),
            original_keys=True, overwrite=as_switch(values["overwrite"]),
            memory_budget=values["memory_budget"], cancel=self._cancel))
        row = result_row(self.prefix, "restored", objects=result.objects, bytes_in=result.bytes,
                         seconds=round(time.monotonic() - started, 2), archive=result.archive,
                         skipped=result.skipped_same, target=result.target)
        self.log.info("%s: restored %d objects (%d bytes) to %s, %d already there", self.prefix,
                      result.objects, result.bytes, result.target, result.skipped_same)
        context["ti"].xcom_push(key=RESTORE_ROWS_XCOM_KEY, value=[row])
        return row

    def _guard(self, context: Context, step):
        """Run an engine step; a failure pushes the prefix's row and fails the task as
        ``failures`` says: retried only when another try can help (a bug never is)."""
        from s3arch_airflow.failures import fail_task, failed_fields

        try:
            return step()
        except BaseException as exc:
            row = result_row(self.prefix, "failed", **failed_fields(exc))
            context["ti"].xcom_push(key=RESTORE_ROWS_XCOM_KEY, value=[row])
            fail_task(self.prefix, exc)

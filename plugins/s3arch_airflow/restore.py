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
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.providers.amazon.aws.operators.base_aws import AwsBaseOperator
from airflow.providers.amazon.aws.utils.mixins import aws_template_fields

from s3arch.core.options import as_switch, templated_options
from s3arch_airflow.hooks import S3ArchHook
from s3arch_airflow.operators import KILLED, result_row

if TYPE_CHECKING:
    from airflow.sdk import Context

    from s3arch.core.stops import Cancel

RESTORE_ROWS_XCOM_KEY = "restore_rows"


class S3RestoreArchiveOperator(AwsBaseOperator[S3ArchHook]):
    """Restore and extract one archived ``prefix`` (see the module's doc).

    The parameters are the names ``s3arch restore`` and ``s3arch extract`` use, with ``_`` for
    ``-``: ``tier``, ``days``, ``poll_interval`` (seconds between HEADs while waiting; the job
    key of the same name; default by tier), ``wait_timeout`` (seconds before the wait gives up,
    default 48 h; the task then fails retryably, as ``restore --wait`` exits 3: the restore goes
    on in S3), ``overwrite``, ``memory_budget``, ``expected_owner``; ``keys`` and ``glob`` select
    objects, ``target`` is ``s3://BUCKET/PREFIX/`` (empty: back to the source bucket)."""

    aws_hook_class = S3ArchHook
    template_fields: Sequence[str] = aws_template_fields("prefix", *templated_options("restore"))
    ui_color = "#fff3e0"

    def __init__(self, *, source_bucket: str, prefix: str, destination: str, target: str | None = None,
                 keys: list[str] | None = None, glob: str | None = None, tier: str = "Standard",
                 days: int | str = 7, overwrite: bool | str = False, memory_budget: str | int = "256MiB",
                 deferrable: bool = True, poll_interval: float | None = None,
                 wait_timeout: float = 48 * 3600, expected_owner: str | None = None, **kwargs):
        super().__init__(**kwargs)
        self.source_bucket = source_bucket
        self.prefix = prefix
        self.destination = destination
        self.target = target
        self.keys = keys
        self.glob = glob
        self.tier = tier
        self.days = days
        self.overwrite = overwrite
        self.memory_budget = memory_budget
        self.deferrable = deferrable
        self.poll_interval = poll_interval
        self.wait_timeout = wait_timeout
        self.expected_owner = expected_owner  # ExpectedBucketOwner on every request (docs/SECURITY.md)
        self._cancel: Cancel | None = None  # the try's, made when it starts (``execute``)

    @property
    def _hook_parameters(self) -> dict[str, Any]:
        return {**super()._hook_parameters, "expected_owner": self.expected_owner}

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
        from s3arch.format.day import committed_parts
        from s3arch.core.errors import BadArgument
        from s3arch.core.stops import Cancel
        from s3arch.restore.glacier import POLL_SECONDS, request_restore, wait_restored

        if self._cancel is None:  # the try's: a kill while the restore is asked for stops the extract at once
            self._cancel = Cancel()

        def restore():
            """Every part of the day is asked for; the first not yet readable is waited for
            (a wait that ends comes back here, and the others are asked again)."""
            layout = self._layout()
            clients = self.hook.engine_clients()
            parts = committed_parts(clients.control, layout)
            if not parts:
                raise BadArgument(f"{self.prefix} has no committed archive ({layout.manifest_url} does not exist)",
                                  hint="archive it first, or check the dates")
            waiting = []
            for part in parts:
                state = request_restore(clients.control, layout.bucket, part.committed.archive_key, tier=self.tier,
                                        days=int(self.days),
                                        fallback_tier="Standard" if self.tier == "Expedited" else None,
                                        restore_control=clients.single_attempt)
                self.log.info("%s (%s)", state.line(), state.requested)
                waiting += [] if state.readable else [(part.committed, state)]
            return clients, layout, waiting

        clients, layout, waiting = self._guard(context, restore)
        if not waiting:
            return self._extract(context, clients, layout)
        committed, state = waiting[0]
        interval = self.poll_interval or POLL_SECONDS[state.tier or self.tier]
        if self.deferrable:
            from s3arch_airflow.triggers import ArchiveRestoredTrigger

            self.defer(trigger=ArchiveRestoredTrigger(bucket=layout.bucket, key=committed.archive_key,
                                                      aws_conn_id=self.aws_conn_id, region_name=self.region_name,
                                                      verify=self.verify, botocore_config=self.botocore_config,
                                                      poll_interval=interval,
                                                      deadline=time.time() + self.wait_timeout,
                                                      expected_owner=clients.expected_owner),  # "self" resolved
                       method_name="execute_complete")
        self._guard(context, lambda: wait_restored(clients.control, layout.bucket, committed.archive_key,
                                                   timeout=self.wait_timeout, interval=interval))
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

    def _extract(self, context: Context, clients, layout) -> dict:
        from s3arch.core.config import S3Url, parse_size
        from s3arch.restore.days import extract_day_to_s3
        from s3arch.restore.extract import Selection

        target = S3Url.parse(self.target) if self.target else S3Url(self.source_bucket, "")
        keys = None
        if self.keys:  # a key list spans the run's prefixes: each task takes its own
            keys = [k for k in self.keys if k.startswith(self.prefix)]
            if not keys:
                row = result_row(self.prefix, "skipped", error="none of the requested keys is in this prefix")
                context["ti"].xcom_push(key=RESTORE_ROWS_XCOM_KEY, value=[row])
                return row
        started = time.monotonic()
        result = self._guard(context, lambda: extract_day_to_s3(
            clients, layout, target, selection=Selection.of(keys, self.glob or None),
            original_keys=True, overwrite=as_switch(self.overwrite),
            memory_budget=parse_size(self.memory_budget), cancel=self._cancel))
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

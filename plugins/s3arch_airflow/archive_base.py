"""The archive steps' base operator: what every archive step shares, and nothing else (the
operators module's doc: built like the amazon provider's operators, on ``AwsBaseOperator``
with its hook, plugins/s3arch_airflow/hooks.py)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.providers.amazon.aws.operators.base_aws import AwsBaseOperator
from airflow.providers.amazon.aws.utils.mixins import aws_template_fields

from s3arch_airflow.hooks import S3ArchHook
from s3arch_airflow.operator_options import (ARCHIVE, checked_options, known_options, moved_into_options, option_value,
                                             rendered_options)
from s3arch_airflow.task_metrics import emit_asset_event, emit_metrics
from s3arch_airflow.task_rows import ROWS_XCOM_KEY, result_row
from s3arch_airflow.task_stops import KILLED, cancel_if_orphaned

if TYPE_CHECKING:
    from airflow.sdk import Context

    from s3arch.core.stops import Cancel


class S3ArchiveBaseOperator(AwsBaseOperator[S3ArchHook]):
    """What every archive step shares, and nothing else: the hook and the engine's clients,
    the spec of one prefix, cancelling the engine on kill, and one result row per prefix
    (pushed as the ``archive_rows`` XCom even when the task fails). Errors the engine marks
    permanent fail the task without using its retries.

    :param source_bucket: the bucket archived from (templated)
    :param destination: ``s3://BUCKET/PREFIX/`` the archives go under (templated)
    :param options: the job's archive options (its ``operator_args``), by the names of
        tasks/core/options.py: each the job key of that name and the ``s3arch archive`` flag
        with dashes (docs/JOBS.md's settings table), e.g. ``{"storage_class": "DEEP_ARCHIVE",
        "sse": "aws:kms"}``. Templated, as a whole; an unknown key is a TypeError naming the
        known ones. Left out, an option has the job's default: ``processes`` is **1, one task
        is one process**, whatever the prefix's size.
    :param progress_interval: seconds between progress lines in the task log
    :param aws_conn_id: and ``region_name``, ``verify``, ``botocore_config``: as on every
        amazon-provider operator

    The options given as keyword arguments of their names (round 5), ``preview`` and
    ``spec_options`` (round 3) still work for one release, with a ``DeprecationWarning``
    naming ``options={...}``."""

    aws_hook_class = S3ArchHook
    template_fields: Sequence[str] = aws_template_fields("source_bucket", "destination", "options")
    template_fields_renderers = {"options": "json"}
    ui_color = "#e6f0ff"
    action = "archiving"

    def __init__(self, *, source_bucket: str, destination: str, options: Mapping[str, Any] | None = None,
                 progress_interval: float = 10.0, **kwargs):
        name = type(self).__name__
        options = moved_into_options(name, options, kwargs)  # the old spellings, with a warning
        super().__init__(**kwargs)
        self.source_bucket = source_bucket
        self.destination = destination
        self.options = checked_options(name, {} if options is None else options)
        self.progress_interval = progress_interval
        self._cancel: Cancel | None = None  # the try's, made when it starts (``_run_each``)

    @classmethod
    def partial(cls, **kwargs):
        """``BaseOperator.partial``, where the old spellings of the options work as in the
        constructor (moved into ``options``, with the warning)."""
        options = moved_into_options(cls.__name__, kwargs.pop("options", None), kwargs)
        if options is not None:
            kwargs["options"] = checked_options(cls.__name__, options)
        return super().partial(**kwargs)

    @staticmethod
    def option_names() -> tuple[str, ...]:
        """The keys ``options`` takes: every option the table gives the archive steps."""
        return known_options()

    @property
    def storage_class(self) -> str:
        """The archive's storage class (its metrics' tag)."""
        return option_value(self.options, "storage_class")

    def on_kill(self) -> None:
        # Airflow calls it in its SIGTERM handler: Cancel.set only records and sets.
        self.log.warning("task killed: cancelling the archive (%s); its uploads are aborted and nothing "
                         "is committed", self.action)
        if self._cancel is not None:
            self._cancel.set(KILLED)

    def _spec(self, prefix: str, *, delete_source: bool = False, delete_versions: bool = False):
        """The one engine spec of this step for ``prefix``: a dry run deletes nothing."""
        from s3arch.core.config import S3Url
        from s3arch.core.options import archive_spec, as_switch

        values = rendered_options(type(self).__name__, self.options)
        dry_run = values.pop("dry_run", False)
        values.update(delete_source=delete_source, delete_versions=delete_versions and delete_source)
        spec = archive_spec(S3Url(self.source_bucket, prefix), S3Url.parse(self.destination), values)
        return spec.previewed() if as_switch(dry_run) else spec

    @property
    def _hook_parameters(self) -> dict[str, Any]:
        """The hook, and so the engine's clients of the try (the plan task sizes its day and
        archives it with the same ones), name the bucket owner and the throttle budget."""
        # Checked by the table, as the restore operator's options are: native rendering reads an
        # account's twelve digits as a number, which ExpectedBucketOwner refuses.
        owner = ARCHIVE.options()["expected_owner"].job_value(option_value(self.options, "expected_owner"),
                                                              f"{self.task_id}: expected_owner")
        return {**super()._hook_parameters, "expected_owner": owner,
                "throttle_budget": option_value(self.options, "throttle_budget")}

    def _progress(self, label: str):
        from s3arch.core.progress import Progress

        return Progress(lambda snap: self.log.info("%s: %s", label, snap.line()), interval=self.progress_interval)

    def _run_each(self, context: Context, prefixes: list[str], run: Callable[[Any, str], dict]) -> list[dict]:
        """``run(clients, prefix)`` for each prefix, one row each; fails the task (retryable
        or not, as the errors are: ``failures``) if any prefix failed. An engine error fails its
        prefix and the next one runs; anything else (a bug, a timeout) fails the task at once.
        A stop from above (``on_kill``, a lost supervisor) starts no further prefix: their rows
        say they were not run, and the stop fails the task."""
        from s3arch.core.errors import ArchiverError
        from s3arch.core.stops import Cancel
        from s3arch_airflow.failures import fail_if_any, fail_task, failed_fields

        self._cancel = Cancel()  # a fresh one per try
        orphan_watch = cancel_if_orphaned(self._cancel, self.log)
        rows: list[dict] = []
        failed: list[tuple[str, ArchiverError]] = []
        not_run: list[str] = []
        try:
            for n, prefix in enumerate(prefixes):
                if self._cancel.is_set():
                    # SIGKILL follows on_kill within seconds: a prefix started now would be
                    # killed holding its lease, which the retry elsewhere then waits out.
                    not_run = prefixes[n:]
                    rows += [result_row(p, "failed", error=f"not run: {self._cancel.reason}", retryable=True)
                             for p in not_run]
                    break
                try:
                    rows.append(run(self.hook.engine_clients(), prefix))
                except BaseException as exc:  # the row says what happened, whatever it was
                    rows.append(result_row(prefix, "failed", **failed_fields(exc)))
                    if not isinstance(exc, ArchiverError):
                        fail_task(prefix, exc)
                    self.log.error("%s: %s (%s)", prefix, exc, "retryable" if exc.retryable else "permanent: no retry")
                    failed.append((prefix, exc))
        finally:
            orphan_watch.set()
            context["ti"].xcom_push(key=ROWS_XCOM_KEY, value=rows)
            for row in rows:
                self._emit_metrics(row)
        fail_if_any(failed, len(rows), not_run, self._cancel.reason)
        return rows

    def _row(self, prefix: str, result, context: Context | None = None) -> dict:
        """An engine result as ``prefix``'s row, logged; an archived prefix also emits its
        asset event."""
        self.log.info("%s: %s, %d objects, %d -> %d bytes in %.1fs: %s", prefix, result.status, result.objects,
                      result.bytes_in, result.bytes_out, result.seconds, result.archive)
        for note in result.notes:
            self.log.warning("%s: %s", prefix, note)
        row = result_row(prefix, str(result.status), objects=result.objects,
                         bytes_in=result.bytes_in, bytes_out=result.bytes_out or result.estimated_bytes_out or 0,
                         seconds=round(result.seconds, 2), archive=result.archive, manifest=result.manifest,
                         deleted=result.deleted, deletion="finished" if result.deletion else None, cost=result.cost,
                         segments=result.segments, timings=result.timings or None, retention=result.retention,
                         throttled=getattr(result, "throttled", 0), requests=result.requests, cpu_s=result.cpu_s)
        row["ratio"] = round(row["bytes_in"] / row["bytes_out"], 2) if row["bytes_out"] else 0.0
        if context is not None and row["status"] == "archived":
            self._emit_asset_event(context, row)
        return row

    def _emit_metrics(self, row: dict) -> None:
        emit_metrics(row, self.storage_class, self.dag_id)

    def _emit_asset_event(self, context: Context, row: dict) -> None:
        emit_asset_event(context, self.outlets, row)

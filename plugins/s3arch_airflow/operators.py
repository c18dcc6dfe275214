"""The archive DAG's operators, one per step, on one thin base.

Built like the amazon provider's own operators, on ``AwsBaseOperator[S3ArchHook]`` (its hook,
plugins/s3arch_airflow/hooks.py, owns the engine's clients): ``aws_conn_id``, ``region_name``, ``verify`` and ``botocore_config`` mean what they mean
there (the connection's extra ``endpoint_url`` points at MinIO or another S3), and the engine's
control plane and CRT data plane both take region, endpoint and ``verify`` from that hook.
Each step takes the job's archive options as one ``options`` dict (operator_options.py) plus
the few arguments of its own; prefixes and ``options`` are template fields; nothing touches S3
or imports the engine's heavy parts before ``execute``. ``on_kill`` (the task marked failed,
cleared or killed) cancels the engine: uploads are aborted and no manifest is written; so does
a task process that lost its supervisor.

- ``S3ArchivePrefixOperator``: archive a prefix (or a batch of them) in one task, in one
  process unless ``processes`` > 1 (then a prefix over ``segment_min_objects`` /
  ``segment_min_bytes`` is cut into one segment per worker process the task starts).
- ``S3PrepareSegmentsOperator`` -> ``S3ArchiveSegmentOperator`` x N -> ``S3AssembleSegmentsOperator``:
  one large prefix as segment tasks on any workers (docs/JOBS.md, "Large prefixes").
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.providers.amazon.aws.operators.base_aws import AwsBaseOperator
from airflow.providers.amazon.aws.utils.mixins import aws_template_fields

from s3arch_airflow.hooks import S3ArchHook
from s3arch_airflow.operator_options import (checked_options, known_options, moved_into_options, option_value,
                                             rendered_options)

if TYPE_CHECKING:
    from airflow.sdk import Context

    from s3arch.core.stops import Cancel

ROWS_XCOM_KEY = "archive_rows"


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
        return {**super()._hook_parameters, "expected_owner": option_value(self.options, "expected_owner"),
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
                         throttled=getattr(result, "throttled", 0))
        row["ratio"] = round(row["bytes_in"] / row["bytes_out"], 2) if row["bytes_out"] else 0.0
        if context is not None and row["status"] == "archived":
            self._emit_asset_event(context, row)
        return row

    def _emit_metrics(self, row: dict) -> None:
        from airflow.providers.common.compat.sdk import Stats

        tags = {"storage_class": self.storage_class, "status": row["status"], "dag_id": self.dag_id}
        if row["status"] == "failed":
            Stats.incr("s3arch.failures", tags=tags)
            return
        Stats.incr("s3arch.objects", row["objects"], tags=tags)
        Stats.incr("s3arch.bytes_in", row["bytes_in"], tags=tags)
        Stats.incr("s3arch.bytes_out", row["bytes_out"], tags=tags)
        Stats.incr("s3arch.throttled", row.get("throttled", 0), tags=tags)
        Stats.timing("s3arch.seconds", row["seconds"] * 1000.0, tags=tags)

    def _emit_asset_event(self, context: Context, row: dict) -> None:
        from airflow.sdk import Asset, AssetAlias

        extra = {k: row[k] for k in ("prefix", "objects", "bytes_in", "bytes_out", "ratio", "archive", "manifest")}
        for outlet in self.outlets or []:
            if isinstance(outlet, AssetAlias):
                context["outlet_events"][outlet].add(Asset(uri=row["archive"], name=row["archive"]), extra=extra)


class S3ArchivePrefixOperator(S3ArchiveBaseOperator):
    """Archive ``prefix`` of ``source_bucket`` under ``destination`` (s3://BUCKET/PREFIX/).

    ``prefix`` may also be a list of prefixes, archived one after the other: the archive DAG
    gives a task several consecutive days of a range longer than a month (``SPREAD_TASKS``),
    so a year is tens of task instances; a try archives only the days not archived yet
    (the others are ``skipped``), so clearing the task re-runs just its failed days.
    ``segmented``: prefixes archived by segment tasks instead, which this task leaves alone.

    The task result (and the ``archive_rows`` XCom) is one row per prefix: prefix, status,
    objects, bytes_in, bytes_out, ratio, seconds, archive, manifest, error.

    Each prefix archived emits an asset event for ``Asset(<archive URL>)`` with the row as its
    extra, through every ``AssetAlias`` in ``outlets`` (the archive DAG gives one per job,
    ``s3_archive__<job>``), so downstream DAGs can be scheduled on archives (docs/JOBS.md). Per
    prefix, the counters ``s3arch.objects``, ``s3arch.bytes_in``, ``s3arch.bytes_out``,
    ``s3arch.throttled`` (GETs S3 answered 503 SlowDown, waited out), ``s3arch.failures`` and
    the timer ``s3arch.seconds`` go to Airflow's metrics (StatsD or OpenTelemetry, as Airflow is
    configured), tagged with the storage class and status.
    """

    template_fields: Sequence[str] = (*S3ArchiveBaseOperator.template_fields, "prefix", "segmented")

    def __init__(self, *, prefix: str | list[str], delete_source: bool = False, delete_versions: bool = False,
                 allow_empty: bool = False, segmented: list[str] | None = None, **kwargs):
        super().__init__(**kwargs)
        self.prefix = prefix
        self.segmented = segmented
        self.delete_source = delete_source
        self.delete_versions = delete_versions
        self.allow_empty = allow_empty

    @property
    def prefixes(self) -> list[str]:
        return [self.prefix] if isinstance(self.prefix, str) else list(self.prefix)

    @property
    def label(self) -> str:
        """How the UI names a mapped instance (``map_index_template="{{ task.label }}"``)."""
        prefixes = self.prefixes
        if len(prefixes) == 1:
            return prefixes[0]
        return f"{prefixes[0]} .. {prefixes[-1]} ({len(prefixes)} prefixes)"

    def execute(self, context: Context) -> list[dict]:
        prefixes = [p for p in self.prefixes if p not in (self.segmented or ())]
        if len(prefixes) < len(self.prefixes):
            self.log.info("left to segment tasks: %s", ", ".join(p for p in self.prefixes if p not in prefixes))
        return self._run_each(context, prefixes, lambda clients, prefix: self._archive(clients, prefix, context))

    def _archive(self, clients, prefix: str, context: Context) -> dict:
        from s3arch.archive import archive_prefix
        from s3arch.core.errors import EmptyPrefix

        spec = self._spec(prefix, delete_source=self.delete_source, delete_versions=self.delete_versions)
        self.log.info("archiving %s -> %s (%s, %s)", spec.source, spec.destination, spec.storage_class, spec.codec)
        try:
            result = archive_prefix(spec, clients, self._progress(prefix), cancel=self._cancel)
        except EmptyPrefix as exc:
            if not self.allow_empty:
                raise
            self.log.warning("%s", exc)
            return result_row(prefix, "empty")
        return self._row(prefix, result, context)

    def get_openlineage_facets_on_complete(self, task_instance):
        """With the OpenLineage provider installed: each source prefix is an input, each
        archive and manifest an output, as the provider's S3 operators report them."""
        from airflow.providers.common.compat.openlineage.facet import Dataset
        from airflow.providers.openlineage.extractors import OperatorLineage

        from s3arch.core.config import S3Url
        from s3arch.format.manifest import layout_for

        inputs, outputs = [], []
        for prefix in self.prefixes:
            layout = layout_for(S3Url(self.source_bucket, prefix), S3Url.parse(self.destination))
            inputs.append(Dataset(namespace=f"s3://{self.source_bucket}", name=prefix))
            extension = ".tar.gz" if option_value(self.options, "codec") == "gzip" else ".tar.zst"
            outputs += [Dataset(namespace=f"s3://{layout.bucket}", name=layout.archive_key(extension)),
                        Dataset(namespace=f"s3://{layout.bucket}", name=layout.manifest_key)]
        return OperatorLineage(inputs=inputs, outputs=outputs)


class S3PrepareSegmentsOperator(S3ArchiveBaseOperator):
    """A large prefix's first step (the archive DAG's ``prepare`` task): under the prefix's
    lease, plan ``segments`` segments, open the archive's upload and record the plan in S3.
    A committed prefix is skipped; a dry run writes nothing. Its row's status is ``planned``."""

    template_fields: Sequence[str] = (*S3ArchiveBaseOperator.template_fields, "prefix")
    action = "planning segments"

    def __init__(self, *, prefix: str, segments: int, **kwargs):
        super().__init__(**kwargs)
        self.prefix = prefix
        self.segments = segments

    @property
    def label(self) -> str:
        return self.prefix

    def execute(self, context: Context) -> list[dict]:
        from s3arch.archive import prepare_segments

        return self._run_each(context, [self.prefix], lambda clients, prefix: self._row(
            prefix, prepare_segments(self._spec(prefix), self.segments, clients, cancel=self._cancel)))


class S3ArchiveSegmentOperator(S3ArchiveBaseOperator):
    """Segment ``segment`` (0-based) of ``segments`` of a prepared prefix, on any worker: its
    parts go into the archive's upload, what the assembler needs into S3 temporaries. A
    segment already produced is not produced again, a committed prefix has nothing to
    produce (``skipped``), a dry run reads and writes nothing; a failed one retries alone.
    Named ``<prefix> [k/N]`` in the UI."""

    template_fields: Sequence[str] = (*S3ArchiveBaseOperator.template_fields, "prefix", "segment", "segments")
    action = "producing a segment"

    def __init__(self, *, prefix: str, segment: int, segments: int, **kwargs):
        super().__init__(**kwargs)
        self.prefix = prefix
        self.segment = segment
        self.segments = segments

    @property
    def label(self) -> str:
        return f"{self.prefix} [{int(self.segment) + 1}/{self.segments}]"

    def execute(self, context: Context) -> list[dict]:
        return self._run_each(context, [self.prefix], self._produce)

    def _produce(self, clients, prefix: str) -> dict:
        from s3arch.archive import archive_segment

        produced = archive_segment(self._spec(prefix), int(self.segment), clients, self._progress(self.label),
                                   self._cancel)
        self.log.info("%s: %s, %d objects: %s", self.label, produced["status"], produced["objects"],
                      produced.get("note", ""))
        return result_row(prefix, produced["status"], objects=produced["objects"],
                          bytes_in=produced.get("bytes_in", 0), bytes_out=produced.get("size", 0),
                          seconds=produced.get("seconds", 0.0), segments=self.segments)


class S3AssembleSegmentsOperator(S3ArchiveBaseOperator):
    """A large prefix's last step: assemble its produced segments into the archive and commit
    (skip, lease, conditional completion, manifest last, source deletion as configured). A
    missing segment fails it with the name of the segment task to clear. A dry run lists and
    estimates the prefix, for ``segments`` segments."""

    template_fields: Sequence[str] = (*S3ArchiveBaseOperator.template_fields, "prefix")
    action = "assembling segments"

    def __init__(self, *, prefix: str, segments: int, delete_source: bool = False, delete_versions: bool = False,
                 **kwargs):
        super().__init__(**kwargs)
        self.prefix = prefix
        self.segments = segments
        self.delete_source = delete_source
        self.delete_versions = delete_versions

    @property
    def label(self) -> str:
        return self.prefix

    def execute(self, context: Context) -> list[dict]:
        from s3arch.archive import assemble_segments

        def assemble(clients, prefix: str) -> dict:
            spec = self._spec(prefix, delete_source=self.delete_source, delete_versions=self.delete_versions)
            return self._row(prefix, assemble_segments(spec, clients, self._progress(prefix), cancel=self._cancel,
                                                       segments=self.segments), context)

        return self._run_each(context, [self.prefix], assemble)


# The reasons a task's run reads when it is stopped from above (tasks/core/stops.py).
KILLED = "cancelled by Airflow (the task was killed: marked failed or cleared, or it timed out)"
ORPHANED = "cancelled: this task's supervisor is gone, and Airflow retries the work elsewhere"


def cancel_if_orphaned(cancel: Cancel, log, interval: float = 1.0) -> threading.Event:
    """Set ``cancel`` if this task process loses its supervisor.

    Airflow runs each task in its own process group under a supervisor process that
    heartbeats for it. If the supervisor dies (its Celery worker was SIGKILLed or OOM-killed),
    the task process lives on, reparented, with nobody heartbeating: Airflow soon fails the try
    and retries it elsewhere, while this orphan would go on writing (a segment's temporaries
    after the prefix was committed, a lease the retry has to wait out). So an orphan cancels
    itself: its uploads are aborted, its lease released, and nothing is committed. Returns
    the event that ends the watch (set it when the task's work is over)."""
    import os

    parent, done = os.getppid(), threading.Event()

    def watch() -> None:
        while not done.wait(interval) and not cancel.is_set():
            if os.getppid() != parent:
                log.error("this task's supervisor (pid %d) is gone: cancelling, so that the retry Airflow "
                          "schedules elsewhere is the only run of this work", parent)
                cancel.set(ORPHANED)
                return

    threading.Thread(target=watch, name="s3arch-orphan-watch", daemon=True).start()
    return done


def result_row(prefix: str, status: str, **values) -> dict:
    """One prefix's line in the task result and the report."""
    row = {"prefix": prefix, "status": status, "objects": 0, "bytes_in": 0, "bytes_out": 0,
           "ratio": 0.0, "seconds": 0.0, "archive": None, "manifest": None, "deleted": 0,
           "deletion": None, "cost": None, "error": None, "retryable": None, "segments": 1, "timings": None,
           "throttled": 0}
    row.update(values)
    return row



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

Their base is archive_base.py; a prefix's row is task_rows.py's, its metrics and asset events
task_metrics.py's, the stops from above task_stops.py's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from s3arch_airflow.archive_base import S3ArchiveBaseOperator
from s3arch_airflow.operator_options import option_value
from s3arch_airflow.task_rows import result_row

if TYPE_CHECKING:
    from airflow.sdk import Context


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
    A committed prefix is skipped; a dry run writes nothing. Its row's status is ``planned``.
    The day's first keys, listed by the plan task to size it, are not listed again."""

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
        from s3arch_airflow.sizing import sizing_handoff

        return self._run_each(context, [self.prefix], lambda clients, prefix: self._row(
            prefix, prepare_segments(self._spec(prefix), self.segments, clients, cancel=self._cancel,
                                     sized=sizing_handoff(context, prefix))))


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

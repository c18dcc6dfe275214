"""Airflow glue for the s3arch engine: operators that archive one prefix (or a batch) and
restore one archived prefix, the trigger the restore defers to, the report helpers, the DAG
factory (``s3arch_airflow.factory``) that DAG files call, and the Airflow plugin
(``s3arch_airflow.plugin``). Thin on purpose: the work is in the engine, ``s3arch``.

The operators are imported on first use, so loading the plugin (which Airflow's scheduler and
api-server do at start) does not import the AWS provider."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from s3arch_airflow.operators import S3ArchivePrefixOperator
    from s3arch_airflow.operators import S3ArchiveSegmentOperator, S3AssembleSegmentsOperator, S3PrepareSegmentsOperator
    from s3arch_airflow.restore import S3RestoreArchiveOperator

__all__ = ["S3ArchivePrefixOperator", "S3RestoreArchiveOperator"]
__all__ += ["S3PrepareSegmentsOperator", "S3ArchiveSegmentOperator", "S3AssembleSegmentsOperator"]


def __getattr__(name: str) -> Any:
    if name == "S3ArchivePrefixOperator":
        from s3arch_airflow.operators import S3ArchivePrefixOperator
        return S3ArchivePrefixOperator
    if name in ("S3PrepareSegmentsOperator", "S3ArchiveSegmentOperator", "S3AssembleSegmentsOperator"):
        from s3arch_airflow import operators
        return getattr(operators, name)
    if name == "S3RestoreArchiveOperator":
        from s3arch_airflow.restore import S3RestoreArchiveOperator
        return S3RestoreArchiveOperator
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

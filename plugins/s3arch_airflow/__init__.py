"""Airflow glue for the s3arch engine: operators that archive one prefix (or a batch) and
restore one archived prefix, the trigger the restore defers to, the report helpers, and the
DAG factory (``s3arch_airflow.factory``) that DAG files call. Thin on purpose: the work is in
the engine, ``s3arch``."""

from s3arch_airflow.operators import S3ArchivePrefixOperator
from s3arch_airflow.restore import S3RestoreArchiveOperator

__all__ = ["S3ArchivePrefixOperator", "S3RestoreArchiveOperator"]

"""Airflow glue for the s3arch engine: an operator that archives one prefix (or a batch) and
the report helpers the archive DAG uses. Thin on purpose: the work is in ``tasks``."""

from s3arch_airflow.operators import S3ArchivePrefixOperator

__all__ = ["S3ArchivePrefixOperator"]

"""Restore DAGs: ``s3_restore__<job>`` for every job in the jobs file (docs/RESTORE.md), built
by the installed package's DAG factory. The jobs file is ``$S3ARCH_JOBS_FILE``, else
archive_jobs.yaml beside this file."""

from pathlib import Path

from s3arch_airflow.factory import restore_dags

globals().update(restore_dags(Path(__file__).with_name("archive_jobs.yaml")))

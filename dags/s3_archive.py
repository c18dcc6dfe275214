"""Archive DAGs: ``s3_archive__<job>`` for every job in the jobs file (docs/JOBS.md), built by
the installed package's DAG factory. The jobs file is ``$S3ARCH_JOBS_FILE``, else
archive_jobs.yaml beside this file."""

from pathlib import Path

from s3arch_airflow.factory import archive_dags

globals().update(archive_dags(Path(__file__).with_name("archive_jobs.yaml")))

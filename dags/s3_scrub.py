"""Scrub DAGs: ``s3_scrub__<job>`` for every job in the jobs file (docs/CATALOG.md), monthly
checks that every archive is still the one its manifest describes. The jobs file is
``$S3ARCH_JOBS_FILE``, else archive_jobs.yaml beside this file."""

from pathlib import Path

from s3arch_airflow.factory import scrub_dags

globals().update(scrub_dags(Path(__file__).with_name("archive_jobs.yaml")))

"""The Celery workers' configuration: Airflow's own, plus ``s3arch_airflow.preload``, which
each worker imports before it forks its task processes. Set it on every Airflow process of a
Celery deployment (docker-compose.yml does)::

    AIRFLOW__CELERY__CELERY_CONFIG_OPTIONS=s3arch_airflow.celery_config.CELERY_CONFIG
"""

from airflow.providers.celery.executors.default_celery import DEFAULT_CELERY_CONFIG

CELERY_CONFIG = {**DEFAULT_CELERY_CONFIG,
                 "imports": (*DEFAULT_CELERY_CONFIG.get("imports", ()), "s3arch_airflow.preload")}

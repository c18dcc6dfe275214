"""The Airflow plugin ``s3arch``, registered by the package's ``airflow.plugins`` entry point
(pyproject.toml), so an installed package is enough: nothing is copied into the plugins folder.

The operators, trigger and DAG factory need no plugin to work (DAG files import them); the
plugin is where the package's Airflow UI parts are registered (``fastapi_apps``,
``external_views``), so that Airflow lists the package under Admin > Plugins with its version.
Importing this module must stay cheap: the scheduler and api-server import it at start.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin


class S3ArchPlugin(AirflowPlugin):
    name = "s3arch"

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

    # The archive catalog (docs/CATALOG.md): its app is built only where Airflow asks for it
    # (the api-server), so the scheduler's import of the plugin stays cheap.
    @property
    def fastapi_apps(self) -> list[dict]:  # type: ignore[override]
        from s3arch_airflow.catalog_app import URL_PREFIX, app

        return [{"app": app, "url_prefix": URL_PREFIX, "name": "s3arch archive catalog"}]

    external_views = [
        {"name": "Archive catalog", "href": "/s3arch-catalog/", "url_route": "s3arch-catalog",
         "destination": "nav", "category": "browse", "icon": "/s3arch-catalog/icon.svg"},
        {"name": "Catalog", "href": "/s3arch-catalog/?dag_id={DAG_ID}", "url_route": "s3arch-catalog-dag",
         "destination": "dag", "icon": "/s3arch-catalog/icon.svg"},
    ]

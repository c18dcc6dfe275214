"""The package's provider metadata, for Airflow's ProvidersManager.

pyproject.toml registers ``get_provider_info`` under the ``apache_airflow_provider`` entry point,
so `airflow providers list` (and the UI's Admin > Providers) shows s3arch with its version, and
`airflow providers triggers` lists the restore trigger. It declares nothing Airflow would load
from it: the plugin is registered once, through the ``airflow.plugins`` entry point (a
``plugins`` key here would register it a second time), and there is no hook or connection type
of our own (the operators use the Amazon provider's ``aws`` connection).

ProvidersManager calls this while it discovers providers, for every Airflow command that lists
them; an exception here would fail that discovery for every provider, so it imports nothing
but the standard library and cannot raise.
"""

from __future__ import annotations

from importlib import metadata

PACKAGE = "s3arch"  # must equal the distribution's canonical name, or ProvidersManager raises


def get_provider_info() -> dict:
    try:
        versions = [metadata.version(PACKAGE)]
    except metadata.PackageNotFoundError:  # imported from a source tree, not installed
        versions = []
    return {
        "package-name": PACKAGE,
        "name": "s3arch",
        "description": "Archive S3 date prefixes into indexed, compressed tar archives in Glacier: "
                       "operators, a deferrable restore trigger, a DAG factory and an archive catalog.",
        "versions": versions,
        "integrations": [{"integration-name": "s3arch", "tags": ["aws"]}],
        "operators": [{"integration-name": "s3arch",
                       "python-modules": ["s3arch_airflow.operators", "s3arch_airflow.restore"]}],
        "triggers": [{"integration-name": "s3arch", "python-modules": ["s3arch_airflow.triggers"]}],
    }

"""The Airflow face of cdc-platform: a provider over the engine, as thin as ``dagster_defs``.

The long-lived capture stays a service (``cdc-platform run`` / ``serve``); Airflow drives the
batch units (mirror applies, reconciliation, ad-hoc snapshots, daily history) as operators
whose outlets are Airflow assets named by the lake's URIs, and waits on the change log with a
deferrable sensor and an event trigger for an ``AssetWatcher``. docs/airflow.md.
"""

from __future__ import annotations

from typing import Any

__all__ = ["get_provider_info"]

__version__ = "0.1.0"


def get_provider_info() -> dict[str, Any]:
    """What Airflow's ProvidersManager reads through the ``apache_airflow_provider`` entry
    point: the connection type, the hook, operators, sensor and triggers."""
    return {
        "package-name": "cdc-platform",
        "name": "cdc-platform",
        "description": "Change data capture from MySQL/MariaDB binlogs into Delta Lake: "
        "mirrors, reconciliation, snapshots and daily history as Airflow tasks.",
        "versions": [__version__],
        "connection-types": [
            {"connection-type": "cdc_platform", "hook-class-name": "cdc_airflow.hooks.CdcHook"}
        ],
        "operators": [
            {"integration-name": "cdc-platform", "python-modules": ["cdc_airflow.operators"]}
        ],
        "sensors": [
            {"integration-name": "cdc-platform", "python-modules": ["cdc_airflow.sensors"]}
        ],
        "triggers": [
            {"integration-name": "cdc-platform", "python-modules": ["cdc_airflow.triggers"]}
        ],
        "hooks": [{"integration-name": "cdc-platform", "python-modules": ["cdc_airflow.hooks"]}],
    }

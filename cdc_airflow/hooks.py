"""``CdcHook``: the platform for Airflow tasks, from an Airflow connection of type
``cdc_platform``.

The connection names the conf directory (extra ``conf_dir``, else the ``host`` field; without
a connection, ``$CDC_CONF_DIR``). Secrets never go in DAG files: the connection's password, when
set, is the source password, handed to the engine through the environment variable the extra
``password_env`` names (the destinations' ``password_env``), unless the environment already
holds it. A destination whose password variable is unset is not valid, so this happens before
the configuration is read, wherever it is read. The lake's credentials are the standard AWS
environment the engine reads itself.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException
from pyspark.sql import SparkSession

from cdc_platform.config import ConfigSet, Destination, load_config
from cdc_platform.errors import ConfigError
from cdc_platform.spark import SparkSessionFactory

__all__ = ["CONF_DIR_ENV", "CdcHook"]

CONF_DIR_ENV = "CDC_CONF_DIR"
"""Where the conf directory is named when no connection is."""


class CdcHook(BaseHook):
    """Configuration, secrets and the Spark session of one cdc-platform deployment."""

    conn_name_attr = "cdc_conn_id"
    default_conn_name = "cdc_default"
    conn_type = "cdc_platform"
    hook_name = "CDC platform"

    def __init__(self, cdc_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.cdc_conn_id = cdc_conn_id

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """The connection form: the conf directory in ``host``, the source password."""
        return {
            "hidden_fields": ["schema", "login", "port"],
            "relabeling": {"host": "Conf directory", "password": "Source password"},
            "placeholders": {
                "host": "/srv/cdc/conf",
                "extra": '{"conf_dir": "/srv/cdc/conf", "password_env": "CDC_SOURCE_PASSWORD"}',
            },
        }

    def _connection_fields(self) -> tuple[str | None, str | None, str | None]:
        """(conf directory, password variable, source password) from the connection; all
        None without one."""
        try:
            connection = self.get_connection(self.cdc_conn_id)
        except AirflowNotFoundException:
            return None, None, None
        extra = connection.extra_dejson
        conf_dir = extra.get("conf_dir") or connection.host or None
        return conf_dir, extra.get("password_env"), connection.password or None

    def conf_dir(self) -> Path:
        """The conf directory (platform.yaml, destinations/)."""
        conf_dir = self._connection_fields()[0] or os.environ.get(CONF_DIR_ENV)
        if not conf_dir:
            raise ConfigError(
                f"no conf directory: set extra conf_dir (or host) on the Airflow connection "
                f"{self.cdc_conn_id!r}, or ${CONF_DIR_ENV}"
            )
        return Path(conf_dir)

    def load(self) -> ConfigSet:
        """Hand the connection's password to the engine, then read the configuration."""
        conf_dir, password_env, password = self._connection_fields()
        if password_env and password:
            os.environ.setdefault(password_env, password)
        elif password:
            raise ConfigError(
                f"the Airflow connection {self.cdc_conn_id!r} has a password but no extra "
                "password_env naming the variable the destinations read it from"
            )
        return load_config(Path(conf_dir) if conf_dir else self.conf_dir())

    def destination(self, configset: ConfigSet, name: str) -> Destination:
        """A valid destination, else ConfigError naming what is wrong with it."""
        found = configset.destinations.get(name)
        if found is None:
            raise ConfigError(f"{name}: {configset.errors.get(name, 'no such destination')}")
        return found

    @contextmanager
    def spark_session(self, configset: ConfigSet) -> Iterator[SparkSession]:
        """The Spark session `spark:` in platform.yaml chooses, stopped when the task ends."""
        factory = SparkSessionFactory(configset.platform.spark, configset.lake)
        try:
            yield factory.session()
        finally:
            factory.stop()

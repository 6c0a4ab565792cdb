"""Airflow for the provider's tests: a temporary AIRFLOW_HOME with a SQLite metadata database.

Airflow reads its configuration when first imported, so the environment is set here, when
pytest loads this file, before any test module imports Airflow or the provider. These tests
run in .venv-airflow only (scripts/test.sh); tests/conftest.py keeps the main environment's
pytest from collecting them.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="cdc-airflow-home-"))
DAGS_FOLDER = AIRFLOW_HOME / "dags"
DAGS_FOLDER.mkdir()
_OWNER = os.getpid()


@atexit.register
def _remove_home() -> None:
    """A run without the database fixture (unit tests only) leaves no home behind either;
    only this process removes it, never a child it forked."""
    if os.getpid() == _OWNER:
        shutil.rmtree(AIRFLOW_HOME, ignore_errors=True)


os.environ.update(
    {
        "AIRFLOW_HOME": str(AIRFLOW_HOME),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{AIRFLOW_HOME}/airflow.db",
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS_FOLDER),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        # A DAG scheduled on an asset is queued by its events only when it is not paused.
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
    }
)


@pytest.fixture(scope="session")
def airflow_db() -> Iterator[Path]:
    """The metadata database, created once; the home is removed at the end."""
    from airflow.utils.db import initdb  # noqa: PLC0415 (after the environment above)

    initdb()
    try:
        yield AIRFLOW_HOME
    finally:
        shutil.rmtree(AIRFLOW_HOME, ignore_errors=True)

"""A local lake that cannot be written ends `cdc-platform run` with one error naming the path
(issue 42.10): before, the term's start retried the same local error every few seconds for
ever (`starting the term failed (attempt N)`). A real `run` process, a real source."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cdc_platform.testing.destinations import PASSWORD_ENV, write_conf
from cdc_platform.testing.processes import stop_process
from tests.conftest import MariaDBDatabase

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

RUN_ENDS_WITHIN = 120.0
"""A safety net only (a run that retries for ever is stopped here, then fails the test)."""


@pytest.mark.parametrize("below", [False, True], ids=["lake_root-is-a-file", "below-a-file"])
def test_a_lake_root_that_is_no_directory_ends_the_run_with_one_error_naming_it(
    mariadb: MariaDBDatabase, tmp_path: Path, below: bool
) -> None:
    mariadb.server.execute(f"CREATE TABLE {mariadb.name}.t (id INT PRIMARY KEY)")
    regular_file = tmp_path / "lake"
    regular_file.write_text("a regular file, not a directory\n")
    lake_root = regular_file / "sub" if below else regular_file
    conf = tmp_path / "conf"
    write_conf(
        conf,
        destination="d",
        server=mariadb.server,
        user=mariadb.user,
        database=mariadb.name,
        lake_root=lake_root,
    )
    log_file = tmp_path / "run.log"
    command = [sys.executable, "-m", "cdc_platform.cli", "run", "--conf", str(conf)]
    with log_file.open("wb") as out:
        proc = subprocess.Popen(
            [*command, "--destination", "d"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, PASSWORD_ENV: mariadb.user.password},
            start_new_session=True,
        )
    try:
        try:
            code: int | None = proc.wait(timeout=RUN_ENDS_WITHIN)
        except subprocess.TimeoutExpired:
            code = None
    finally:
        stop_process(proc)  # never left running, whatever happened above
    text = log_file.read_text()
    assert code is not None, f"run still retrying after {RUN_ENDS_WITHIN} s:\n{text[-3000:]}"
    assert code != 0, text[-3000:]
    errors = [line for line in text.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, text[-3000:]
    assert str(regular_file) in errors[0], errors[0]
    assert "not a directory" in errors[0].lower(), errors[0]
    assert "attempt" not in text, text[-3000:]
    assert regular_file.read_text() == "a regular file, not a directory\n"

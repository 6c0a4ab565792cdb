"""The console script's exit: the command's code, never pyarrow's abort at interpreter exit."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

READ_A_DELTA_TABLE = """
import sys, tempfile
import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
path = tempfile.mkdtemp(dir=sys.argv[1])
write_deltalake(path, pa.table({"a": list(range(100))}), partition_by=None)
print(DeltaTable(path).to_pyarrow_dataset().to_table().num_rows)
"""


def run(script: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    file = tmp_path / "child.py"
    file.write_text(textwrap.dedent(script))
    return subprocess.run(
        [sys.executable, str(file), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_dataset_read_then_exit_process_always_ends_with_the_code(tmp_path: Path) -> None:
    """Plain interpreter exit after a dataset read aborts now and then (exit 134; the control
    below shows whether it did in this run); ``exit_process`` never does. Six exits each (each
    a new interpreter, about 0.7 CPU-s): on an idle machine three runs in four had an abort
    among the six plain exits; on a busy one the abort is rarer and the test xfails."""
    fixed = READ_A_DELTA_TABLE + (
        "from cdc_platform.infra.process_exit import exit_process\nexit_process(3)\n"
    )
    codes = [run(fixed, tmp_path).returncode for _ in range(6)]
    assert codes == [3] * 6
    results = [run(READ_A_DELTA_TABLE, tmp_path) for _ in range(6)]
    assert all(r.stdout.strip() == "100" for r in results)
    if all(r.returncode == 0 for r in results):
        pytest.xfail("this pyarrow did not abort in 6 plain exits; exit_process may be moot")


def test_console_exit_codes(tmp_path: Path) -> None:
    """--help exits 0, a usage error 2 with argparse's message, output flushed."""
    help_ = subprocess.run(
        [sys.executable, "-m", "cdc_platform.cli", "--help"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert help_.returncode == 0
    assert "usage:" in help_.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "cdc_platform.cli", "no-such-command"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 2
    assert "invalid choice" in bad.stderr

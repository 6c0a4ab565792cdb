"""The run and serve processes keep pandas out, and everything they do with Arrow and Delta
still works without it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

_SCRIPT = textwrap.dedent(
    """
    import sys
    from cdc_platform.infra.lean_imports import keep_out_pandas

    assert keep_out_pandas()
    import pyarrow as pa
    import pyarrow.parquet as pq
    from deltalake import CommitProperties, DeltaTable, write_deltalake

    lake = sys.argv[1]
    batch = pa.table({"seq": pa.array([1, 2, 3], pa.int64()), "after": ["a", "b", None]})
    pq.write_table(batch, lake + "/file.parquet")
    DeltaTable.create(lake + "/t", batch.schema)
    write_deltalake(lake + "/t", batch, mode="append",
                    commit_properties=CommitProperties(custom_metadata={"k": "v"}))
    write_deltalake(lake + "/t", pa.Table.from_pydict({"seq": [4], "after": ["d"]}),
                    mode="append", schema_mode="merge")
    table = DeltaTable(lake + "/t")
    assert table.to_pyarrow_table().num_rows == 4
    assert sorted(table.to_pyarrow_dataset().to_table().column("seq").to_pylist()) == [1, 2, 3, 4]
    table.delete("seq = 4")
    table.optimize.compact()
    table.create_checkpoint()
    table.cleanup_metadata()
    table.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    assert DeltaTable(lake + "/t").to_pyarrow_table().num_rows == 3
    assert "pandas" not in sys.modules, "pandas was imported"
    try:
        import pandas  # noqa: F401
    except ModuleNotFoundError as exc:
        print("refused:", exc)
    """
)


def test_delta_and_arrow_work_with_pandas_kept_out(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "refused: No module named 'pandas' (the run and serve processes" in done.stdout


def test_nothing_done_once_pandas_is_imported() -> None:
    script = (
        "import pandas\n"
        "from cdc_platform.infra.lean_imports import keep_out_pandas\n"
        "assert not keep_out_pandas()\n"
        "import pandas.api\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr

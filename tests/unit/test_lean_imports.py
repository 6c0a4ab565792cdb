"""The run and serve processes keep pandas out, and everything they do with Arrow and Delta
still works without it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cdc_platform.infra.lean_imports import ALLOCATOR_SETTINGS

pytestmark = pytest.mark.unit

_SCRIPT = textwrap.dedent(
    """
    import os, sys
    from cdc_platform.infra.lean_imports import keep_out_unused_libraries, return_freed_memory

    assert keep_out_unused_libraries() == ("pandas", "numpy")
    assert set(return_freed_memory()) == {"ARROW_DEFAULT_MEMORY_POOL", "_RJEM_MALLOC_CONF"}
    import datetime, decimal
    import pyarrow as pa
    assert pa.default_memory_pool().backend_name == "jemalloc"
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
    assert DeltaTable(lake + "/t").to_pyarrow_table().num_rows == 4
    from deltalake import QueryBuilder
    query = QueryBuilder().register("changes", table)
    ordered = pa.table(query.execute("SELECT * FROM changes WHERE seq >= 2 ORDER BY seq"))
    assert ordered.column("seq").to_pylist() == [2, 3, 4]
    streamed = pa.RecordBatchReader.from_stream(query.execute("SELECT seq FROM changes"))
    assert sorted(v for b in streamed for v in b.column("seq").to_pylist()) == [1, 2, 3, 4]
    assert pa.table(table.get_add_actions(flatten=True)).num_rows == 2
    typed = pa.table({
        "at": pa.array([datetime.datetime(2024, 1, 2, 3, 4, 5, 6)], pa.timestamp("us", "UTC")),
        "amount": pa.array([decimal.Decimal("1.50")], pa.decimal128(10, 2)),
    })
    assert typed.to_pylist()[0]["amount"] == decimal.Decimal("1.50")
    table.delete("seq = 4")
    table.optimize.compact()
    table.create_checkpoint()
    table.cleanup_metadata()
    table.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    assert DeltaTable(lake + "/t").to_pyarrow_table().num_rows == 3
    assert "pandas" not in sys.modules, "pandas was imported"
    assert "numpy" not in sys.modules, "numpy was imported"
    for name in ("pandas", "numpy.linalg"):
        try:
            __import__(name)
        except ModuleNotFoundError as exc:
            print("refused:", exc)
    sys.stdout.flush()
    import os
    os._exit(0)  # as the console script ends (no native teardown at interpreter exit)
    """
)


def _clean_env() -> dict[str, str]:
    """This environment without the allocator settings (the console script makes them)."""
    return {k: v for k, v in os.environ.items() if k not in ALLOCATOR_SETTINGS}


def _python(script: str, *args: str, env: dict[str, str] | None = None) -> str:
    """The standard output of ``script`` in a fresh interpreter, which must succeed.

    The interpreter ends as the console script ends it (infra/process_exit.py): pyarrow's
    teardown at interpreter exit aborts now and then after all work is done."""
    ending = "\nfrom cdc_platform.infra.process_exit import exit_process\nexit_process(0)\n"
    done = subprocess.run(
        [sys.executable, "-c", script + ending, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=_clean_env() if env is None else env,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_delta_and_arrow_work_with_pandas_and_numpy_kept_out(tmp_path: Path) -> None:
    """... and with the allocators set to give memory back."""
    out = _python(_SCRIPT, str(tmp_path))
    assert "refused: No module named 'pandas' (the run and serve processes" in out
    assert "refused: No module named 'numpy' (the run" in out


def test_nothing_imported_already_is_kept_out() -> None:
    script = (
        "import pandas\n"
        "from cdc_platform.infra.lean_imports import keep_out_unused_libraries\n"
        "assert keep_out_unused_libraries() == ()\n"
        "import pandas.api, numpy.linalg\n"
    )
    _python(script, env=dict(os.environ))


@pytest.mark.parametrize(
    ("command", "lean", "kept_out"),
    [("run", True, True), ("serve", True, True), ("status", True, False), ("run", False, False)],
)
def test_the_console_script_keeps_them_out_for_run_and_serve_only(
    tmp_path: Path, command: str, lean: bool, kept_out: bool
) -> None:
    """``main(lean=True)`` is the console script's process; tests calling ``main`` keep
    their interpreter as it is."""
    args = [command, "--conf", str(tmp_path / "missing")]
    if command == "run":
        args += ["--destination", "d"]
    script = (
        "import sys\n"
        "from cdc_platform.cli import main\n"
        f"main({args!r}, lean={lean})\n"
        "try:\n"
        "    import numpy\n"
        "except ModuleNotFoundError:\n"
        "    print('kept out')\n"
        "import os, pyarrow\n"
        "print('pool', pyarrow.default_memory_pool().backend_name)\n"
        "print('delta-rs', os.environ.get('_RJEM_MALLOC_CONF'))\n"
    )
    out = _python(script)
    assert ("kept out" in out) is kept_out, out
    assert ("pool jemalloc" in out) is kept_out, out
    assert ("delta-rs background_thread:true" in out) is kept_out, out


def test_allocator_settings_of_the_environment_win_and_a_loaded_library_is_left_alone() -> None:
    script = (
        "import os\n"
        "from cdc_platform.infra.lean_imports import return_freed_memory\n"
        "assert list(return_freed_memory()) == ['ARROW_DEFAULT_MEMORY_POOL']\n"
        "assert os.environ['_RJEM_MALLOC_CONF'] == 'narenas:1'\n"
        "del os.environ['_RJEM_MALLOC_CONF'], os.environ['ARROW_DEFAULT_MEMORY_POOL']\n"
        "import deltalake\n"
        "assert return_freed_memory() == {}\n"
        "assert '_RJEM_MALLOC_CONF' not in os.environ\n"
    )
    _python(script, env={**_clean_env(), "_RJEM_MALLOC_CONF": "narenas:1"})


def test_the_run_path_loads_no_pyarrow_file_systems(tmp_path: Path) -> None:
    """The modules a ``run`` imports, and its side files, leave ``pyarrow.parquet`` and the
    file systems it brings (with the S3 library, about 12 MB resident) to reconciliation."""
    script = (
        "import sys\n"
        "import cdc_platform.cli.parser, cdc_platform.runtime.supervisor\n"
        "import cdc_platform.runtime.instance, cdc_platform.sink.delta\n"
        "from cdc_platform.sink.lake_files import LakeFile\n"
        "LakeFile(sys.argv[1] + '/_start.json').write_json({'a': 1})\n"
        "print(sorted(m for m in ('pyarrow.fs', 'pyarrow.parquet') if m in sys.modules))\n"
    )
    assert _python(script, str(tmp_path)).strip() == "[]"


def test_without_a_metrics_port_prometheus_client_stays_out(tmp_path: Path) -> None:
    """``run`` and ``serve`` import prometheus_client only for an endpoint they serve."""
    (tmp_path / "platform.yaml").write_text(f"lake_root: {tmp_path / 'lake'}\n")
    script = (
        "import argparse, pathlib, sys\n"
        "import cdc_platform.runtime.serve\n"
        "from cdc_platform.cli.arguments import metrics_of\n"
        "from cdc_platform.config import load_config\n"
        "args = argparse.Namespace(metrics_port=None, metrics_host=None)\n"
        "assert metrics_of(args, load_config(pathlib.Path(sys.argv[1]))) is None\n"
        "print('prometheus_client' in sys.modules)\n"
    )
    assert _python(script, str(tmp_path)).strip() == "False"

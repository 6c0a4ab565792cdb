"""``bench/run_rss.py --against REV`` runs the code it names: ``python -m`` puts its working
folder first on ``sys.path``, so a console script started from the checkout's root ran the
checkout's ``cdc_platform/`` whatever ``PYTHONPATH`` said, and both arms of a comparison were
the same code."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_the_console_runs_the_code_it_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code = tmp_path / "code"
    cli = code / "cdc_platform" / "cli"
    cli.mkdir(parents=True)
    (code / "cdc_platform" / "__init__.py").write_text("")
    (cli / "__init__.py").write_text("")
    (cli / "__main__.py").write_text("import cdc_platform\nprint(cdc_platform.__file__)\n")
    sys.path.insert(0, str(BENCH))
    try:
        import run_rss  # noqa: PLC0415 (a bench script, importable from its folder only)
    finally:
        sys.path.remove(str(BENCH))
    monkeypatch.chdir(BENCH.parent)  # where the bench is usually started from
    done = run_rss.console(code, [], os.environ)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(code / "cdc_platform" / "__init__.py")

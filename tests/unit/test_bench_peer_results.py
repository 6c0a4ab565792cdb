"""bench/peer_results.py: the readers' result line and the per-workload table."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = pytest.mark.unit


def _load() -> ModuleType:
    path = Path(__file__).resolve().parents[2] / "bench" / "peer_results.py"
    spec = importlib.util.spec_from_file_location("peer_results", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["peer_results"] = module
    spec.loader.exec_module(module)
    return module


pr = _load()


def test_the_last_result_line_counts_among_log_lines() -> None:
    stdout = (
        "[main] WARN something\n"
        'PEER_RESULT {"rows": 1, "elapsed_s": 1.0, "first_row_s": 0.5, "complete": false}\n'
        "more log\n"
        'PEER_RESULT {"peer": "debezium-count", "rows": 1000, "elapsed_s": 4.0,'
        ' "first_row_s": 2.0, "complete": true}\n'
    )
    result = pr.parse_result("debezium-count", stdout, peak_rss_mb=300.0, peak_pss_mb=290.0)
    assert result == pr.ReaderResult("debezium-count", 1000, 4.0, 2.0, True, 300.0, 290.0)
    assert result.rows_per_s == 250.0
    assert result.after_first_row_per_s == pytest.approx(999 / 2.0)


def test_a_reader_without_a_result_line_is_an_error() -> None:
    with pytest.raises(pr.ResultLineMissingError, match="flink-cdc"):
        pr.parse_result("flink-cdc", "Exception in thread main\n")


def test_the_python_readers_line_parses_back() -> None:
    line = pr.result_line(rows=10, elapsed_s=2.0004, first_row_s=1.0, complete=True)
    assert pr.parse_result("cdc-decode", line).elapsed_s == 2.0


def test_the_table_gives_ratios_to_debezium_and_marks_incomplete_readers() -> None:
    results = [
        pr.ReaderResult("debezium-count", 1000, 10.0, 5.0, True, 400.0, 400.0),
        pr.ReaderResult("cdc-decode", 1000, 5.0, 1.0, True, 300.0, 100.0),
        pr.ReaderResult("cdc-delta", 1000, 4.0, 4.0, True, 300.0, 200.0),
        pr.ReaderResult("flink-cdc", 10, 30.0, 29.0, False, 500.0, 500.0),
    ]
    lines = pr.table("insert", 1000, results).splitlines()
    assert lines[0] == "workload insert: 1000 rows"
    debezium, ours, committed, flink = lines[2:6]
    assert debezium.split()[-3:] == ["1.00", "1.00", "1.00"]
    # rows/s 200 vs 100, drain 999/4 vs 999/5, PSS 100 vs 400 MB
    assert ours.split()[1:3] == ["200", "250"]
    assert ours.split()[-3:] == ["2.00", "1.25", "0.25"]
    # every row in one commit: no drain rate, no ratio of it
    assert committed.split()[2] == "-"
    assert committed.split()[-3:] == ["2.50", "-", "0.50"]
    assert flink.startswith("flink-cdc")
    assert "incomplete: 10 of 1000 rows" in flink


def test_without_a_complete_debezium_run_there_are_no_ratios() -> None:
    results = [pr.ReaderResult("cdc-decode", 1000, 5.0, 1.0, True, 100.0)]
    assert pr.table("oltp", 1000, results).splitlines()[2].split()[-3:] == ["-", "-", "-"]


HARNESSES = Path(__file__).resolve().parents[2] / "bench" / "peers"
JAVA_RESULT = re.compile(
    r'System\.out\.printf\(\s*(Locale\.ROOT,\s*)?"(PEER_RESULT [^"\\]*(?:\\.[^"\\]*)*)"'
)
JAVA_SAMPLES = {"%d": "1000", "%.3f": "2.500", "%b": "true", "%s": "count", "%n": "\n"}


def _render_java_format(java_format: str) -> str:
    """A Java printf format with sample values, as the JVM prints it in a neutral locale."""
    text = java_format.replace('\\"', '"')
    return re.sub(r"%(?:\.3f|[dbsn])", lambda m: JAVA_SAMPLES[m.group(0)], text)


def test_every_jvm_harness_prints_a_result_line_peers_py_parses() -> None:
    sources = sorted(HARNESSES.glob("*/src/main/java/**/*Peer.java"))
    assert {s.relative_to(HARNESSES).parts[0] for s in sources} >= {
        "canal",
        "debezium",
        "flink-cdc",
    }
    for source in sources:
        found = JAVA_RESULT.search(source.read_text())
        assert found, f"{source.name}: no PEER_RESULT printf"
        # a locale with a decimal comma would print 2,500 and break the JSON
        assert found.group(1), f"{source.name}: the result line is not printed in Locale.ROOT"
        result = pr.parse_result(source.stem, _render_java_format(found.group(2)))
        assert (result.rows, result.elapsed_s, result.first_row_s) == (1000, 2.5, 2.5)
        assert result.complete


def test_the_table_compares_canal_to_debezium() -> None:
    results = [
        pr.ReaderResult("debezium-count", 1000, 10.0, 5.0, True, 400.0, 400.0),
        pr.ReaderResult("canal", 1000, 4.0, 2.0, True, 120.0, 100.0),
    ]
    canal = pr.table("wide", 1000, results).splitlines()[3]
    assert canal.split()[0] == "canal"
    assert canal.split()[-3:] == ["2.50", "2.50", "0.25"]

"""The pure parts of bench/peers.py: a reader's result line, and the table of one workload.

Every reader (the JVM harnesses under bench/peers/ and bench/peers/cdc_reader.py) ends with one
line ``PEER_RESULT {json}`` on stdout: rows seen, seconds from its own start to the last row,
seconds to the first row, and whether it saw every row it was asked for.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

PREFIX = "PEER_RESULT "
BASELINE = "debezium-count"
"""The reader every ratio is taken to: Debezium's embedded engine with a counting consumer."""


@dataclass(frozen=True)
class ReaderResult:
    """What one reader reported, with the peak RSS of its process tree sampled from outside."""

    reader: str
    rows: int
    elapsed_s: float
    first_row_s: float
    complete: bool
    peak_rss_mb: float = 0.0
    peak_pss_mb: float = 0.0

    @property
    def rows_per_s(self) -> float:
        """Rows over the whole run, start-up included (the reader's own clock)."""
        return self.rows / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def after_first_row_per_s(self) -> float:
        """Rows after the first one over the time after it: the drain rate without start-up."""
        drain = self.elapsed_s - self.first_row_s
        return (self.rows - 1) / drain if drain > 0 and self.rows > 1 else 0.0


class ResultLineMissingError(ValueError):
    """A reader's output had no ``PEER_RESULT`` line (it failed before the end)."""


def parse_result(
    reader: str, stdout: str, peak_rss_mb: float = 0.0, peak_pss_mb: float = 0.0
) -> ReaderResult:
    """The last ``PEER_RESULT`` line of ``stdout``."""
    lines = [line for line in stdout.splitlines() if line.startswith(PREFIX)]
    if not lines:
        raise ResultLineMissingError(f"{reader}: no {PREFIX.strip()} line in its output")
    fields = json.loads(lines[-1][len(PREFIX) :])
    return ReaderResult(
        reader=reader,
        rows=int(fields["rows"]),
        elapsed_s=float(fields["elapsed_s"]),
        first_row_s=float(fields["first_row_s"]),
        complete=bool(fields["complete"]),
        peak_rss_mb=peak_rss_mb,
        peak_pss_mb=peak_pss_mb,
    )


def result_line(rows: int, elapsed_s: float, first_row_s: float, complete: bool) -> str:
    """The line a Python reader prints (the JVM harnesses print the same by hand)."""
    fields = {
        "rows": rows,
        "elapsed_s": round(elapsed_s, 3),
        "first_row_s": round(first_row_s, 3),
        "complete": complete,
    }
    return PREFIX + json.dumps(fields)


def _ratio(value: float, base: float | None) -> str:
    return f"{value / base:.2f}" if base and value else "-"


def table(workload: str, rows: int, results: Sequence[ReaderResult]) -> str:
    """One workload's table: rows/s (whole run and after the first row), seconds to the first
    row, peak RSS and PSS, and the ratios of rows/s and PSS to Debezium's counting consumer
    ("-" where a rate is undefined: every row arrived at once, in one commit)."""
    base = next((r for r in results if r.reader == BASELINE and r.complete), None)
    header = (
        f"{'reader':<16} {'rows/s':>9} {'drain/s':>9} {'1st row':>8} {'peak RSS':>9} "
        f"{'peak PSS':>9} {'x Dbz rows/s':>12} {'x Dbz drain':>11} {'x Dbz PSS':>9}"
    )
    out = [f"workload {workload}: {rows} rows", header]
    for r in results:
        if not r.complete:
            out.append(f"{r.reader:<16} incomplete: {r.rows} of {rows} rows in {r.elapsed_s:.1f} s")
            continue
        drain = f"{r.after_first_row_per_s:,.0f}" if r.after_first_row_per_s else "-"
        out.append(
            f"{r.reader:<16} {r.rows_per_s:>9,.0f} {drain:>9} "
            f"{r.first_row_s:>7.1f}s {r.peak_rss_mb:>7.0f}MB {r.peak_pss_mb:>7.0f}MB "
            f"{_ratio(r.rows_per_s, base.rows_per_s if base else None):>12} "
            f"{_ratio(r.after_first_row_per_s, base.after_first_row_per_s if base else None):>11} "
            f"{_ratio(r.peak_pss_mb, base.peak_pss_mb if base else None):>9}"
        )
    return "\n".join(out)

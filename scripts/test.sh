#!/usr/bin/env bash
# Set up (idempotent), then lint, type-check and run every test: unit and integration, the
# integration tests against private MariaDB and ZooKeeper servers and real Delta tables.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# The static checks (ruff, mypy --strict, the import contracts) run beside the tests, on the
# same two cores: mypy's minute of one core is otherwise a minute of wall time before them.
static_log=$(mktemp)
(
  set -e
  .venv/bin/ruff check --quiet .
  .venv/bin/ruff format --check --quiet .
  .venv/bin/mypy --strict cdc_platform dagster_defs
  .venv/bin/lint-imports --no-cache
) > "$static_log" 2>&1 &
static_pid=$!
# Test files run in parallel worker processes, each file whole on one worker, the longest
# first (tests/conftest.py SLOWEST_FILES), and every test on an Apache Spark engine on one
# worker (its JVMs start once): most integration time is waiting on servers and
# subprocesses, so three workers share two cores well. Each worker starts its own private
# servers (session fixtures) on free ports in its own temporary directory.
# CDC_TEST_WORKERS=0 runs in one process.
tests_status=0
.venv/bin/pytest -n "${CDC_TEST_WORKERS:-3}" --dist loadfile --no-loadscope-reorder \
  -m "unit or integration" "$@" || tests_status=$?
static_status=0
wait "$static_pid" || static_status=$?
if [ "$static_status" -ne 0 ]; then
  echo "static checks failed (ruff, ruff format, mypy --strict, lint-imports):"
  cat "$static_log"
fi
rm -f "$static_log"
if [ "$tests_status" -ne 0 ]; then
  exit "$tests_status"
fi
exit "$static_status"

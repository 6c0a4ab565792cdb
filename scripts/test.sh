#!/usr/bin/env bash
# Set up (idempotent), then lint, type-check and run every test: unit and integration, the
# integration tests against private MariaDB and ZooKeeper servers and real Delta tables; the
# Airflow provider's tests (tests/airflow) in .venv-airflow, beside the main suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
.venv/bin/ruff check --quiet .
.venv/bin/ruff format --check --quiet .
.venv/bin/mypy --strict cdc_platform dagster_defs
.venv-airflow/bin/mypy --strict cdc_airflow
.venv/bin/lint-imports --no-cache > /dev/null || .venv/bin/lint-imports --no-cache
# Test files run in parallel worker processes, each file whole on one worker, the longest
# first (tests/conftest.py SLOWEST_FILES): most integration time is waiting on servers and
# subprocesses, so three workers share two cores well. Each worker starts its own private
# servers (session fixtures) on free ports in its own temporary directory.
# CDC_TEST_WORKERS=0 runs in one process.
# The Airflow tests (their own environment: Airflow's pins fight Dagster's) run at the same
# time in the background, so they add nothing to the wall time; both exit codes count.
airflow_log="$(mktemp "${TMPDIR:-/tmp}/cdc-airflow-tests.XXXXXX")"
.venv-airflow/bin/pytest -q -p no:cacheprovider -m "unit or integration" tests/airflow \
  >"$airflow_log" 2>&1 &
airflow_pid=$!
trap 'kill "$airflow_pid" 2>/dev/null || true' INT TERM
main_rc=0
.venv/bin/pytest -n "${CDC_TEST_WORKERS:-3}" --dist loadfile --no-loadscope-reorder \
  -m "unit or integration" "$@" || main_rc=$?
airflow_rc=0
wait "$airflow_pid" || airflow_rc=$?
if [ "$airflow_rc" -ne 0 ]; then
  echo "--- tests/airflow (.venv-airflow) FAILED (exit $airflow_rc) ---"
  cat "$airflow_log"
else
  echo "--- tests/airflow (.venv-airflow): $(grep -E '[0-9]+ passed' "$airflow_log" | tail -n 1)"
fi
rm -f "$airflow_log"
[ "$main_rc" -eq 0 ] && [ "$airflow_rc" -eq 0 ]

#!/usr/bin/env bash
# Set up (idempotent), then lint, type-check and run every test: unit and integration, the
# integration tests against private MariaDB and ZooKeeper servers and real Delta tables; the
# Airflow provider's tests (tests/airflow) in .venv-airflow, beside the main suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# The static checks (ruff, mypy --strict, the import contracts) run beside the tests, on the
# same two cores: mypy's minute of one core is otherwise a minute of wall time before them.
# They run at the lowest priority: the tests keep both cores (they are bound by the CPU), and
# the checks take the moments the cores would idle (a few percent of the run, most of it at
# its end). Nothing in them waits on a clock, so being slowed costs them nothing.
static_log="$(mktemp "${TMPDIR:-/tmp}/cdc-static-checks.XXXXXX")"
(
  set -e
  renice -n 19 -p "$BASHPID" >/dev/null 2>&1 || true
  .venv/bin/ruff check --quiet .
  .venv/bin/ruff format --check --quiet .
  .venv/bin/mypy --strict cdc_platform dagster_defs
  .venv/bin/lint-imports --no-cache >/dev/null || .venv/bin/lint-imports --no-cache
) >"$static_log" 2>&1 &
static_pid=$!
# The Airflow tests (their own environment: Airflow's pins fight Dagster's) run at the same
# time in the background, so they add nothing to the wall time; every exit code counts.
# Their environment is set up there too (its first install takes minutes on a fresh machine;
# the main suite needs none of it, so it does not wait for it).
airflow_log="$(mktemp "${TMPDIR:-/tmp}/cdc-airflow-tests.XXXXXX")"
(
  set -e
  scripts/setup.sh --airflow
  echo "mypy --strict cdc_airflow (.venv-airflow):"
  .venv-airflow/bin/mypy --strict cdc_airflow
  .venv-airflow/bin/pytest -q -p no:cacheprovider -m "unit or integration" tests/airflow
) >"$airflow_log" 2>&1 &
airflow_pid=$!
trap 'kill "$airflow_pid" "$static_pid" 2>/dev/null || true' INT TERM
# Test files run in parallel worker processes, each file whole on one worker, the longest
# first (tests/conftest.py SLOWEST_FILES); the tests on each Apache Spark engine form one
# unit of their own (each JVM starts once per run). Much integration time is waiting on
# servers, daemons and subprocesses: with three workers on two cores, the cores were a fifth
# idle in the run's second half (two workers waiting at once); a fourth worker fills those
# gaps for about 4 % more CPU (its own servers). Each worker starts its
# own private servers (session fixtures) on free ports in its own temporary directory.
# CDC_TEST_WORKERS=0 runs in one process. The 25 longest tests are listed at the end (where
# the time goes, for the 15-minute aim).
main_rc=0
.venv/bin/pytest -n "${CDC_TEST_WORKERS:-4}" --dist loadfile --no-loadscope-reorder \
  --durations=25 -m "unit or integration" "$@" || main_rc=$?
airflow_rc=0
wait "$airflow_pid" || airflow_rc=$?
if [ "$airflow_rc" -ne 0 ]; then
  echo "--- tests/airflow (.venv-airflow) FAILED (exit $airflow_rc) ---"
  cat "$airflow_log"
else
  echo "--- tests/airflow (.venv-airflow): $(grep -E '[0-9]+ passed' "$airflow_log" | tail -n 1)"
fi
static_rc=0
wait "$static_pid" || static_rc=$?
if [ "$static_rc" -ne 0 ]; then
  echo "--- static checks FAILED (ruff, ruff format, mypy --strict, lint-imports) ---"
fi
cat "$static_log"
rm -f "$airflow_log" "$static_log"
[ "$main_rc" -eq 0 ] && [ "$airflow_rc" -eq 0 ] && [ "$static_rc" -eq 0 ]

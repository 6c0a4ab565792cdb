#!/usr/bin/env bash
# Set up (idempotent), then lint, type-check and run every test: unit and integration, the
# integration tests against private MariaDB and ZooKeeper servers and real Delta tables.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
.venv/bin/ruff check --quiet .
.venv/bin/ruff format --check --quiet .
.venv/bin/mypy --strict cdc_platform dagster_defs
.venv/bin/lint-imports --no-cache > /dev/null || .venv/bin/lint-imports --no-cache
# Test files run in parallel worker processes, each file whole on one worker, the longest
# first (tests/conftest.py SLOWEST_FILES): most integration time is waiting on servers and
# subprocesses, so three workers share two cores well. Each worker starts its own private
# servers (session fixtures) on free ports in its own temporary directory.
# CDC_TEST_WORKERS=0 runs in one process.
exec .venv/bin/pytest -n "${CDC_TEST_WORKERS:-3}" --dist loadfile --no-loadscope-reorder \
  -m "unit or integration" "$@"

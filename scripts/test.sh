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
exec .venv/bin/pytest -m "unit or integration" "$@"

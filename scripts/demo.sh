#!/usr/bin/env bash
# Set up (idempotent), then run the local demo: a private MariaDB with binlog, a live workload,
# and the `shop` destination streaming every change into var/demo/lake/shop/changes.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/cdc-platform demo --conf conf "$@"

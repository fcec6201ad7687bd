#!/usr/bin/env bash
# The main job: set up if needed, then run the demo end to end through the Dagster code location on
# the embedded default (local Spark, files under ./var, Dagster's SQLite instance in var/dagster_home).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
rm -rf var/store var/landing var/latest_state var/dagster_home
export DAGSTER_HOME="$PWD/var/dagster_home"
exec .venv/bin/python -m compaction_assets.demo "$@"

#!/usr/bin/env bash
# The main job: set up if needed, then run the demo end to end through the Dagster code location on
# the embedded default (local Spark, files under ./var, Dagster's SQLite instance in var/dagster_home).
# Nothing is deleted here: the demo replaces only the logs and landing files an earlier demo run made
# (listed in <store>/_demo.json) and refuses, touching nothing, a store or landing folder holding others.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export DAGSTER_HOME="$PWD/var/dagster_home"
exec .venv/bin/python -m compaction_assets.demo "$@"

#!/usr/bin/env bash
# The Dagster UI (and daemon: sensors run) on the demo's data, bound to 127.0.0.1 unless HOST is set.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export DAGSTER_HOME="$PWD/var/dagster_home"
mkdir -p "$DAGSTER_HOME"
[ -f "$DAGSTER_HOME/dagster.yaml" ] || printf 'telemetry:\n  enabled: false\n' > "$DAGSTER_HOME/dagster.yaml"
exec .venv/bin/dagster dev -w workspace.yaml -h "${HOST:-127.0.0.1}" -p "${PORT:-3000}"

#!/usr/bin/env bash
# The Dagster UI (and daemon: sensors run) on the demo's data, bound to 127.0.0.1 unless HOST is set.
# Unless SPARK_REMOTE or SPARK_MASTER is already set (or SPARK_CONNECT=0), a local Spark Connect server
# is started first and every run reaches it through SPARK_REMOTE, so no run pays a JVM start; it is
# stopped with the UI.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export DAGSTER_HOME="$PWD/var/dagster_home"
mkdir -p "$DAGSTER_HOME"
# telemetry off; the Spark pool's limit (README, "Concurrency and retries")
[ -f "$DAGSTER_HOME/dagster.yaml" ] ||
  printf 'telemetry:\n  enabled: false\nconcurrency:\n  pools:\n    default_limit: 2\n' > "$DAGSTER_HOME/dagster.yaml"
if [ -z "${SPARK_REMOTE:-}" ] && [ -z "${SPARK_MASTER:-}" ] && [ "${SPARK_CONNECT:-1}" != "0" ]; then
  echo "ui.sh: starting a local Spark Connect server (stopped with the UI)" >&2
  SPARK_REMOTE="$(bash scripts/spark-connect.sh start)"
  export SPARK_REMOTE
  trap 'bash scripts/spark-connect.sh stop' EXIT
fi
.venv/bin/dagster dev -w workspace.yaml -h "${HOST:-127.0.0.1}" -p "${PORT:-3000}"

#!/usr/bin/env bash
# The Dagster UI (and daemon: sensors run) on the demo's data, bound to 127.0.0.1 unless HOST is set
# (PORT: 3000). DAGSTER_HOME (default var/dagster_home) may name a production instance's folder: its
# dagster.yaml (e.g. PostgreSQL, docs/deployment.md) is used as it is.
# Unless SPARK_REMOTE or SPARK_MASTER is already set (or SPARK_CONNECT=0), a local Spark Connect server
# is started first and every run reaches it through SPARK_REMOTE, so no run pays a JVM start; it is
# stopped with the UI.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export DAGSTER_HOME="${DAGSTER_HOME:-$PWD/var/dagster_home}"
mkdir -p "$DAGSTER_HOME"
# telemetry off; the Spark pool's limit (docs/dagster.md, "Concurrency and retries"); the run queue looked
# at every second, not Dagster's 5 (the demo's instance_yaml writes the same)
[ -f "$DAGSTER_HOME/dagster.yaml" ] ||
  printf 'telemetry:\n  enabled: false\nconcurrency:\n  pools:\n    default_limit: 2\n    granularity: run\nrun_queue:\n  dequeue_interval_seconds: 1\n  dequeue_use_threads: true\n  dequeue_num_workers: 4\n' > "$DAGSTER_HOME/dagster.yaml"
if [ -z "${SPARK_REMOTE:-}" ] && [ -z "${SPARK_MASTER:-}" ] && [ "${SPARK_CONNECT:-1}" != "0" ]; then
  echo "ui.sh: starting a local Spark Connect server (stopped with the UI)" >&2
  SPARK_REMOTE="$(bash scripts/spark-connect.sh start)"
  export SPARK_REMOTE
  trap 'bash scripts/spark-connect.sh stop' EXIT
fi
# Dagster 1.13's `dg dev` (dagster-dg-cli, pinned with dagster) serving the same workspace.yaml; VIRTUAL_ENV
# as `source .venv/bin/activate` sets it, so dg finds the project's environment active
VIRTUAL_ENV="$PWD/.venv" .venv/bin/dg dev -w workspace.yaml -h "${HOST:-127.0.0.1}" -p "${PORT:-3000}"

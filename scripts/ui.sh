#!/usr/bin/env bash
# The Dagster UI (and daemon: sensors run) on the demo's data, bound to 127.0.0.1 unless HOST is set
# (PORT: 3000). DAGSTER_HOME (default var/dagster_home) may name a production instance's folder: its
# dagster.yaml (e.g. PostgreSQL, docs/deployment.md) is used as it is.
# Unless SPARK_REMOTE or SPARK_MASTER is already set (or SPARK_CONNECT=0), a local Spark Connect server
# is started first and every run reaches it through SPARK_REMOTE, so no run pays a JVM start; it is
# stopped with the UI.
# It refuses, before it starts anything, when its port is taken or another ui.sh serves the same instance
# (a second daemon would run the same sensors twice); on exit (Ctrl-C) it stops only what it started.
set -euo pipefail
cd "$(dirname "$0")/.."
HOST="${HOST:-127.0.0.1}"
PORT="${PORT:-3000}"
export DAGSTER_HOME="${DAGSTER_HOME:-$PWD/var/dagster_home}"
UI_PID_FILE="$DAGSTER_HOME/ui.sh.pid"
# python3 (not the project's environment, which setup.sh may not have made yet): can HOST:PORT be bound?
if ! python3 - "$HOST" "$PORT" <<'PY'
import socket, sys
s = socket.socket(socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds: a closed port in TIME_WAIT is free
try:
    s.bind((sys.argv[1], int(sys.argv[2])))
except OSError:
    sys.exit(1)
finally:
    s.close()
PY
then
  echo "ui.sh: port $PORT on $HOST is in use (another UI?); nothing was started. Stop what holds it, or set PORT" >&2
  exit 1
fi
if [ -f "$UI_PID_FILE" ]; then
  other="$(cat "$UI_PID_FILE" 2>/dev/null || true)"
  if [ -n "$other" ] && ps -p "$other" -o args= 2>/dev/null | grep -q "ui.sh"; then
    echo "ui.sh: another ui.sh (pid $other) serves the instance $DAGSTER_HOME (its daemon runs the sensors);" \
      "nothing was started. Stop it, or set DAGSTER_HOME to another instance" >&2
    exit 1
  fi
fi
bash scripts/setup.sh
mkdir -p "$DAGSTER_HOME"
echo $$ > "$UI_PID_FILE"
stop_started=()  # what this script started, stopped on exit (and nothing else)
on_exit() {
  for command in ${stop_started[@]+"${stop_started[@]}"}; do eval "$command"; done
  if [ "$(cat "$UI_PID_FILE" 2>/dev/null || true)" = "$$" ]; then rm -f "$UI_PID_FILE"; fi
}
trap on_exit EXIT
# telemetry off; the Spark pool's limit (docs/dagster.md, "Concurrency and retries"); the run queue looked
# at every second, not Dagster's 5 (the demo's instance_yaml writes the same)
[ -f "$DAGSTER_HOME/dagster.yaml" ] ||
  printf 'telemetry:\n  enabled: false\nconcurrency:\n  pools:\n    default_limit: 2\n    granularity: run\nrun_queue:\n  dequeue_interval_seconds: 1\n  dequeue_use_threads: true\n  dequeue_num_workers: 4\n' > "$DAGSTER_HOME/dagster.yaml"
if [ -z "${SPARK_REMOTE:-}" ] && [ -z "${SPARK_MASTER:-}" ] && [ "${SPARK_CONNECT:-1}" != "0" ]; then
  if SPARK_REMOTE="$(bash scripts/spark-connect.sh status)"; then
    # another ui.sh's or an operator's server: used, and left running on exit
    echo "ui.sh: using the Spark Connect server already running at $SPARK_REMOTE (not stopped with the UI)" >&2
  else
    echo "ui.sh: starting a local Spark Connect server (stopped with the UI)" >&2
    stop_started+=("bash scripts/spark-connect.sh stop")
    SPARK_REMOTE="$(bash scripts/spark-connect.sh start)"
  fi
  export SPARK_REMOTE
fi
# Dagster 1.13's `dg dev` (dagster-dg-cli, pinned with dagster) serving the same workspace.yaml; VIRTUAL_ENV
# as `source .venv/bin/activate` sets it, so dg finds the project's environment active
VIRTUAL_ENV="$PWD/.venv" .venv/bin/dg dev -w workspace.yaml -h "$HOST" -p "$PORT"

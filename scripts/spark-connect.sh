#!/usr/bin/env bash
# A long-lived local Spark Connect server (PySpark's own sbin/start-connect-server.sh) on 127.0.0.1, so
# that runs reach a warm Spark through SPARK_REMOTE instead of starting a JVM each.
#   bash scripts/spark-connect.sh start    # starts it (if not running), waits until it answers
#   bash scripts/spark-connect.sh stop
#   bash scripts/spark-connect.sh status   # prints the SPARK_REMOTE to use; exit 1 when not running
# SPARK_CONNECT_PORT (15002), SPARK_CONNECT_MASTER (local[*]), SPARK_CONNECT_DIR (var/spark-connect: pid,
# logs, scratch space), SPARK_DRIVER_MEMORY (the server's memory, when set); COMPACTION_JVM_QUICK_START
# (on by default: the server JVM runs the fast compiler only, see compaction_assets/spark/__init__.py);
# SPARK_CONNECT_WARM_UP (1: a small workload runs once the server answers, compaction_assets/warm_start/warm_up.py).
set -euo pipefail
cd "$(dirname "$0")/.."
PORT="${SPARK_CONNECT_PORT:-15002}"
DIR="$(mkdir -p "${SPARK_CONNECT_DIR:-var/spark-connect}" && cd "${SPARK_CONNECT_DIR:-var/spark-connect}" && pwd)"
PY="$PWD/.venv/bin/python"
SPARK_HOME="$("$PY" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')"
export SPARK_HOME SPARK_PID_DIR="$DIR" SPARK_LOG_DIR="$DIR/logs" SPARK_IDENT_STRING="compaction-$PORT"
# The server's Python workers (the segment rewrite) run this project's interpreter, which has pyarrow.
export PYSPARK_PYTHON="${PYSPARK_PYTHON:-$PY}"
REMOTE="sc://127.0.0.1:$PORT"

answers() {
  "$PY" - "$PORT" <<'PY'
import socket, sys
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1).close()
except OSError:
    sys.exit(1)
PY
}

case "${1:-}" in
  start)
    if answers; then echo "$REMOTE"; exit 0; fi
    # the server JVM's options as the product's settings give them (COMPACTION_JVM_QUICK_START)
    JAVA_OPTIONS="$("$PY" -c 'from compaction_assets.spark import connect_server_java_options as o; print(o())')"
    mem=()
    [ -n "${SPARK_DRIVER_MEMORY:-}" ] && mem=(--driver-memory "$SPARK_DRIVER_MEMORY")
    bash "$SPARK_HOME/sbin/start-connect-server.sh" --master "${SPARK_CONNECT_MASTER:-local[*]}" "${mem[@]}" \
      --conf spark.connect.grpc.binding.address=127.0.0.1 \
      --conf spark.connect.grpc.binding.port="$PORT" \
      --conf spark.driver.host=127.0.0.1 --conf spark.driver.bindAddress=127.0.0.1 \
      --conf spark.ui.enabled=false \
      --conf spark.local.dir="$DIR/tmp" \
      --conf spark.sql.sources.parallelPartitionDiscovery.threshold=1000000 \
      --conf "spark.driver.extraJavaOptions=$JAVA_OPTIONS" \
      >/dev/null
    for _ in $(seq 1 360); do
      if answers; then
        if [ "${SPARK_CONNECT_WARM_UP:-1}" != "0" ]; then
          # the first queries of each kind compile on a fresh server: paid here, not by the first run
          # (its output to the log: this command's stdout is the address alone, `$(... start)` reads it)
          SPARK_REMOTE="$REMOTE" "$PY" -m compaction_assets.warm_start.warm_up >>"$SPARK_LOG_DIR/warm-up.log" 2>&1 ||
            echo "spark-connect: the warm-up failed (see $SPARK_LOG_DIR/warm-up.log); the server runs" >&2
        fi
        echo "$REMOTE"; exit 0
      fi
      sleep 0.5
    done
    echo "spark-connect: the server did not answer on 127.0.0.1:$PORT within 180 s; see $SPARK_LOG_DIR" >&2
    exit 1
    ;;
  stop)
    bash "$SPARK_HOME/sbin/stop-connect-server.sh" >/dev/null 2>&1 || true
    # the daemon script only signals the server: wait until its port is free, so that a start right
    # after (ui.sh again) gets a server of its own
    for _ in $(seq 1 60); do
      answers || exit 0
      sleep 0.5
    done
    echo "spark-connect: the server on 127.0.0.1:$PORT still answers 30 s after it was told to stop" >&2
    exit 1
    ;;
  status)
    if answers; then echo "$REMOTE"; else exit 1; fi
    ;;
  *)
    echo "usage: bash scripts/spark-connect.sh start|stop|status" >&2
    exit 2
    ;;
esac

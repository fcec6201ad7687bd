#!/usr/bin/env bash
# A second engine for the topic tables: DuckDB's own Iceberg reader, in a virtualenv of its own
# (.venv-duckdb), for tests/table/test_second_engine.py. Its own because the product pins a duckdb for
# which no Iceberg extension package exists; these pins ship the iceberg and avro extensions as Python
# packages, so loading them downloads nothing at run time. Idempotent: reinstalls only when the pins
# below change (a stamp file, as scripts/setup.sh does). scripts/test.sh runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
PINS=(duckdb==1.5.5 duckdb-extension-iceberg==1.5.5 duckdb-extension-avro==1.5.5)
if [ ! -x .venv-duckdb/bin/python ]; then
  echo "setup-duckdb-iceberg: creating .venv-duckdb" >&2
  "$PY" -m venv .venv-duckdb
fi
stamp=.venv-duckdb/.installed-$(printf '%s\n' "${PINS[@]}" | sha1sum | cut -c1-12)
if [ ! -f "$stamp" ]; then
  echo "setup-duckdb-iceberg: installing ${PINS[*]}" >&2
  .venv-duckdb/bin/python -m pip install -q "${PINS[@]}"
  rm -f .venv-duckdb/.installed-* && touch "$stamp"
fi
echo "setup-duckdb-iceberg: ready (.venv-duckdb)" >&2

#!/usr/bin/env bash
# Cold and warm (one Spark Connect server) measured the same way; see bench/modes.py --help.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || bash scripts/setup.sh
source bench/extras.sh   # DuckDB for E
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec .venv/bin/python -m bench.modes "$@"

#!/usr/bin/env bash
# The benchmark (not part of the test run). Usage:
#   bash bench/run.sh            # default matrix (1M-record logs, D at 1/10/50%, a 10M-record log with a 1g driver)
#   bash bench/run.sh --quick    # ~2-minute smoke run at tiny sizes
#   bash bench/run.sh --full     # the default plus the 10M-record rows of the matrix
# More options: bash bench/run.sh --help. Results: bench/results/<timestamp>/ and bench/results/latest.*
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  bash scripts/setup.sh
fi
source bench/extras.sh
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec .venv/bin/python -m bench.run "$@"

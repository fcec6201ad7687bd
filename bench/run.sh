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
# Install the pinned `bench` extras of pyproject.toml when one is missing or at another version
# (only those packages: the project itself stays installed as it is).
missing=$(.venv/bin/python - <<'PY'
import importlib.metadata as md, re
text = open("pyproject.toml").read()
block = re.search(r'^bench = \[(.*?)\]', text, re.S | re.M).group(1)
for spec in re.findall(r'"([^"]+)"', block):
    name, _, want = spec.partition("==")
    try:
        ok = md.version(name) == want
    except md.PackageNotFoundError:
        ok = False
    if not ok:
        print(spec)
PY
)
if [ -n "$missing" ]; then
  echo "bench: installing $(echo $missing)" >&2
  # shellcheck disable=SC2086
  .venv/bin/python -m pip install -q $missing
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec .venv/bin/python -m bench.run "$@"

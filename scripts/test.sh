#!/usr/bin/env bash
# Set up if needed, then run the test suite (slow tests excluded unless TEST_ALL=1) and the
# conformance checker. Exits non-zero when anything fails, including "no tests collected".
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || exit 1
marker=(-m "not slow")
[ "${TEST_ALL:-0}" = 1 ] && marker=()
.venv/bin/python -m pytest "${marker[@]}" "$@"
rc=$?
if [ $rc -eq 5 ]; then
  echo "test.sh: pytest collected no tests; that is a failure" >&2
  exit 5
fi
[ $rc -ne 0 ] && exit $rc
if [ -d ../shared/conformance ]; then
  echo "test.sh: conformance cases" >&2
  .venv/bin/python ../shared/conformance/check.py --runner ".venv/bin/python -m compaction_assets.conformance" || exit 1
fi

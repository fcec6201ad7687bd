#!/usr/bin/env bash
# Set up if needed, run the static checks (scripts/lint.sh), then the test suite (slow tests excluded
# unless TEST_ALL=1) and the conformance checker; with TEST_REAL=1 then the real-system suite (marker
# ci_real: the UI in chromium, a Spark cluster and Connect, the S3 server, the PostgreSQL instance, the
# pool, kill trials), where a server that cannot start is a failure naming it. Exits non-zero when
# anything fails, including "no tests collected".
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || exit 1
# the static checks first (ruff's lint and format, mypy): a finding fails the run before any test starts
bash scripts/lint.sh || { echo "test.sh: scripts/lint.sh failed" >&2; exit 1; }
# the browser for the UI test (opt-in elsewhere): installed here when we may, else that test says why it skips
bash scripts/setup-browser.sh || echo "test.sh: scripts/setup-browser.sh failed; the UI test will say why" >&2
bash scripts/setup-duckdb-iceberg.sh || echo "test.sh: scripts/setup-duckdb-iceberg.sh failed; tests/table/test_second_engine.py will say why" >&2
marker=(-m "not slow")
[ "${TEST_ALL:-0}" = 1 ] && marker=()
real=0
[ "${TEST_REAL:-0}" = 1 ] && [ "${TEST_ALL:-0}" != 1 ] && real=1
if [ $real = 1 ]; then
  bash scripts/setup-postgres.sh || echo "test.sh: scripts/setup-postgres.sh failed" >&2
  # every real server's program, checked before anything runs: one line naming what is missing
  bash scripts/check-real-systems.sh || exit 1
fi
.venv/bin/python -m pytest "${marker[@]}" "$@"
rc=$?
if [ $rc -eq 5 ]; then
  echo "test.sh: pytest collected no tests; that is a failure" >&2
  exit 5
fi
[ $rc -ne 0 ] && exit $rc
if [ $real = 1 ]; then
  # the real systems; kill trials at the count that fits CI's time (docs/testing.md has the figures)
  echo "test.sh: the real-system suite (-m ci_real)" >&2
  CI=true KILL_TRIALS="${KILL_TRIALS:-8}" .venv/bin/python -m pytest -m ci_real "$@"
  rc=$?
  [ $rc -eq 5 ] && echo "test.sh: pytest collected no real-system tests; that is a failure" >&2
  [ $rc -ne 0 ] && exit $rc
fi
# The repository's copy of the public cases ran inside pytest (tests/conformance/). The shared suite, when it
# sits beside the clone, runs in addition; under CI its absence is a failure, not a skip.
if [ -d ../shared/conformance ]; then
  echo "test.sh: shared conformance cases (../shared/conformance)" >&2
  .venv/bin/python ../shared/conformance/check.py --runner ".venv/bin/python -m compaction_assets.conformance" || exit 1
elif [ "${CI:-}" = true ]; then
  echo "test.sh: CI=true but ../shared/conformance is missing: the shared conformance suite must run under CI" >&2
  exit 1
else
  echo "test.sh: ../shared/conformance not found; only the repository's cases (tests/conformance) ran" >&2
fi

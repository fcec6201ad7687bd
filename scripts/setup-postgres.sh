#!/usr/bin/env bash
# PostgreSQL's server programs (initdb, pg_ctl, postgres), for the test of the production Dagster instance
# (tests/defs/test_postgres_instance.py starts its own server on loopback; nothing here starts one).
# Installs Debian's postgresql with apt-get when they are missing and we are root; says why otherwise.
set -euo pipefail
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && exit 0
command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1 && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "setup-postgres: PostgreSQL is missing; installing it needs root and apt-get (apt-get install postgresql)" >&2
  exit 1
fi
echo "setup-postgres: installing PostgreSQL (for the production instance's test)" >&2
apt-get update -qq && apt-get install -y -qq postgresql >/dev/null
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1

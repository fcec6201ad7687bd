#!/usr/bin/env bash
# Set up from nothing: a virtualenv in .venv with the pinned dependencies (constraints.txt: the whole
# environment) and this project installed, with the dev and postgres extras.
# Needs Python 3.10-3.12 and Java 17 (PySpark); installs Java with apt-get when it is missing and we are root.
# No browser: the browser test of the Dagster UI needs chromium, which scripts/setup-browser.sh installs
# (opt-in; scripts/test.sh runs it).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! command -v java >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing Java 17 (needed by Spark)" >&2
    apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless >/dev/null
  else
    echo "setup: Java 17 is required by Spark; install it (e.g. apt-get install openjdk-17-jre-headless)" >&2
    exit 1
  fi
fi
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv" >&2
  "$PY" -m venv .venv
fi
stamp=.venv/.installed-$(cat pyproject.toml constraints.txt | sha1sum | cut -c1-12)
# Reinstall when pyproject.toml or constraints.txt changed, or when a dev tool the tests need (playwright) went missing.
if [ ! -f "$stamp" ] || ! .venv/bin/python -c "import playwright" >/dev/null 2>&1; then
  echo "setup: installing dependencies (a few minutes the first time)" >&2
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  # constraints.txt: every package at the version tested, so a new release of a transitive dependency
  # cannot change this environment (docs/deployment.md)
  .venv/bin/python -m pip install -q -c constraints.txt -e ".[dev]"
  rm -f .venv/.installed-* && touch "$stamp"
fi
# The project's modules compiled once, as a wheel's install compiles them: an editable install leaves
# source only, and where PYTHONDONTWRITEBYTECODE is set each command compiled them again (0.13 s of the
# start of every cleaning process). A module edited later is compiled from source, as always.
.venv/bin/python -m compileall -q compaction_assets resources bench >/dev/null
# The driver JVM's class-data archive (a command's Spark starts in about half the time); built again only
# when Java or PySpark changed. Without it everything works, only starts slower.
.venv/bin/python -m compaction_assets.warm_start.jvm_archive ||
  echo "setup: the JVM class-data archive was not built; Spark commands start slower" >&2
echo "setup: ready (.venv)" >&2

#!/usr/bin/env bash
# Opt-in: Debian's chromium, for the browser test of the Dagster UI (tests/e2e/test_webserver_ui.py,
# driven by the pinned playwright package of the dev extra; `playwright install` is never run, it would
# download a browser of its own). Nothing else needs a browser: scripts/setup.sh and scripts/demo.sh
# install none and need no root. scripts/test.sh runs this (CI runs as root, so there it installs).
# Installs with apt-get when chromium is missing and we are root; otherwise it says why in
# .venv/.chromium-unavailable, and the UI test skips with that reason (outside CI).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .venv
rm -f .venv/.chromium-unavailable
command -v chromium >/dev/null 2>&1 && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  why="chromium is missing; installing it needs root and apt-get (apt-get install chromium)"
else
  echo "setup-browser: installing chromium (for the browser test of the Dagster UI)" >&2
  why=""
  { apt-get update -qq && apt-get install -y -qq chromium >/dev/null && command -v chromium >/dev/null; } ||
    why="apt-get install chromium failed on this machine"
fi
if [ -n "$why" ]; then
  echo "setup-browser: $why; tests/e2e/test_webserver_ui.py will skip" >&2
  echo "$why" > .venv/.chromium-unavailable
fi

#!/usr/bin/env bash
# Set up if needed, then run the main job on the embedded default (local Spark, files under ./var).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
rm -rf var/store var/landing
exec .venv/bin/python -m compaction_assets --store var/store --topics topics.yaml demo "$@"

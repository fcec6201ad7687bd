#!/usr/bin/env bash
# The house's static checks, with the tools pinned in the dev extra (.venv, scripts/setup.sh): ruff's lint
# rules and ruff's format over the product, the tests, the benchmark and the scripts, then mypy over the
# files pyproject.toml's [tool.mypy] names. Every check runs even when an earlier one fails, so one run
# shows every finding; exits non-zero when any check has a finding. scripts/test.sh runs it first and
# .pre-commit-config.yaml runs the same checks before a commit.
set -uo pipefail
cd "$(dirname "$0")/.."
paths=(compaction_assets resources tests bench scripts)
for tool in ruff mypy; do
  if [ ! -x ".venv/bin/$tool" ]; then
    echo "lint.sh: .venv/bin/$tool is missing; run bash scripts/setup.sh (it installs the dev extra)" >&2
    exit 1
  fi
done
failed=()
.venv/bin/ruff check "${paths[@]}" || failed+=("ruff check")
# --check changes nothing: it lists the files ruff format would rewrite
.venv/bin/ruff format --check "${paths[@]}" || failed+=("ruff format --check (run .venv/bin/ruff format on the files listed)")
.venv/bin/mypy || failed+=("mypy")
if [ ${#failed[@]} -ne 0 ]; then
  printf 'lint.sh: failed: %s\n' "${failed[@]}" >&2
  exit 1
fi
echo "lint.sh: ruff check, ruff format --check and mypy passed" >&2

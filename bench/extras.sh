#!/usr/bin/env bash
# Sourced by bench/run.sh and bench/modes.sh: install the pinned `bench` extras of pyproject.toml when one
# is missing or at another version (only those packages: the project itself stays installed as it is).
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

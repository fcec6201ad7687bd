"""Kafka-grade log compaction for logs kept in files, on Spark (engine), with Dagster definitions."""


def run_in_project_environment(module: str) -> None:
    """Under a Python that lacks the project's dependencies (a bare `python` in the checkout), run
    `python -m <module>` again, same arguments, with the environment `scripts/setup.sh` builds (.venv);
    a one-line error when there is none. A no-op where the dependencies are found."""
    import importlib.util
    import os
    import sys

    if all(importlib.util.find_spec(name) for name in ("pyarrow", "pyspark")):
        return
    venv = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".venv", "bin", "python")
    # paths as given, not resolved: the environment's python is a link to the bare one it was made from
    if os.path.isfile(venv) and os.path.abspath(sys.executable) != venv:
        os.execv(venv, [venv, "-m", module, *sys.argv[1:]])
    sys.exit(f"{module}: {sys.executable} has no pyarrow or pyspark; run `bash scripts/setup.sh` and use {venv}")

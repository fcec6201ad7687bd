"""Warm a long-lived Spark before its first real run: `python -m compaction_assets.warm_start.warm_up`.

A fresh Spark Connect server loads, generates and compiles the code of each kind of query the first time
a client sends one; this warm-up pays for that before the first real run would.
`scripts/spark-connect.sh start` runs this once the server answers (unless
SPARK_CONNECT_WARM_UP=0): the class-data archive's small workload (`jvm_archive.common_paths`: cleanings,
an incremental one, a latest state and a read of tiny logs in a temporary store, through the same engine as
every command), against the session SPARK_REMOTE names. Prints one line on stderr; a failure is reported
and exits non-zero, and leaves the server as it was.
"""

from __future__ import annotations

import sys
import tempfile
import time

from compaction_assets.errors import first_line


def warm_up() -> float:
    """Run the small workload on the product's session (SPARK_REMOTE: the server); its seconds."""
    from compaction_assets.spark import get_spark
    from compaction_assets.warm_start.jvm_archive import common_paths

    started = time.monotonic()
    spark = get_spark()
    with tempfile.TemporaryDirectory(prefix="compaction-warm-up-") as root:
        common_paths(spark, root)
    return time.monotonic() - started


def main() -> int:
    """Command line: warm the session's Spark; one line on stderr."""
    try:
        seconds = warm_up()
    except Exception as exc:  # a warm-up is an optimisation: say why it failed, never hide the server
        print(f"warm-up: failed ({type(exc).__name__}: {first_line(exc, None, blank='')})", file=sys.stderr)
        return 1
    print(f"warm-up: done in {seconds:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

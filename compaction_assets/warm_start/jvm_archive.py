"""Build the driver JVM's class-data archive: `python -m compaction_assets.warm_start.jvm_archive [--force]`.

A fresh JVM spends seconds loading and verifying Spark's classes before a command does anything. The
JDK can archive the classes a workload loaded (`-XX:ArchiveClassesAtExit`) and map them at the next
start (`-XX:SharedArchiveFile`, see `spark.driver_java_options`). This runs a small real workload (two
cleanings, a latest state and a read of a few hundred records in a temporary store, through the same
engine as every command) in a child JVM that writes the archive when it exits; `scripts/setup.sh` runs
it once. Without the archive everything works, only starts slower.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

from compaction_assets import settings
from compaction_assets.errors import CompactionError


def workload(root: str, dump_to: str) -> None:
    """What the archived JVM runs (`common_paths` in a session that writes the archive at exit)."""
    from compaction_assets.spark import get_spark, spark_conf_from_env

    spark = get_spark(spark_conf_from_env(dump_archive_to=dump_to))
    common_paths(spark, root)
    spark.stop()


def common_paths(spark, root: str) -> None:
    """The engine's common paths on tiny logs in a store under `root` (offset and timestamp strategies):
    a forced cleaning, an incremental one after a few updates (deletion vector, stamped files), a latest
    state and a read. The class-data archive records what they load; a fresh Connect server runs them
    once (`compaction_assets.warm_start.warm_up`) so that the first real run does not compile them."""
    from compaction_assets.cleaning import engine
    from compaction_assets.log import writer
    from compaction_assets.log.spark_reads import read_df
    from compaction_assets.state.latest_state import latest_state_df
    from compaction_assets.store.log_store import LogStore
    from compaction_assets.topics.config import build_config

    store = LogStore(os.path.join(root, "store"), gc_grace_s=0)
    for strategy in ("offset", "timestamp"):
        config = build_config({"compaction.strategy": strategy, "segment.bytes": 4096})
        log = store.log(f"warmup-{strategy}-0")
        for round_ in range(3):
            writer.append(
                log,
                config,
                [
                    {
                        "key": f"k{k}",
                        "value": None if (k + round_) % 5 == 0 else f"v{round_}",
                        "timestamp": 1000 + round_ * 100 + k,
                    }
                    for k in range(100)
                ],
            )
        writer.roll(log)
        engine.run(log, config, 10**12, spark=spark, force=True)
        writer.append(log, config, [{"key": f"k{k}", "value": "v3", "timestamp": 2000 + k} for k in range(0, 100, 9)])
        writer.roll(log)
        engine.run(log, config, 10**12 + 1, spark=spark, force=True)
        latest_state_df(spark, log, config).write.parquet(os.path.join(root, f"latest-{strategy}"))
        read_df(spark, log).collect()


def build(force: bool = False) -> str | None:
    """Build the archive for this Java and PySpark unless it exists; its path (None: no Java found)."""
    from compaction_assets.spark import class_archive_path

    env = settings.current()
    if not env.jvm_quick_start:  # no JVM the product starts maps one: building it would cost a JVM run for nothing
        print("jvm-archive: COMPACTION_JVM_QUICK_START is off; nothing to build", file=sys.stderr)
        return None
    path = class_archive_path(env)
    if path is None:
        print("jvm-archive: no java found (JAVA_HOME or PATH); nothing to build", file=sys.stderr)
        return None
    if os.path.isfile(path) and not force:
        print(f"jvm-archive: up to date ({path})", file=sys.stderr)
        return path
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    for name in os.listdir(folder):  # what an interrupted build left
        if name.endswith(".partial"):
            os.remove(os.path.join(folder, name))
    partial = f"{path}.{os.getpid()}.partial"
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="jvm-archive-") as root:
        # a child process: its JVM writes the archive as it exits, after the child's Python. The JVM inherits
        # the child's stdout, so reading that pipe to its end waits for the JVM too (and keeps whatever it
        # prints out of this command's output).
        child = subprocess.run(
            [
                sys.executable,
                "-m",
                "compaction_assets.warm_start.jvm_archive",
                "--workload",
                root,
                "--dump-to",
                partial,
            ],
            capture_output=True,
            text=True,
        )
    if child.returncode != 0 or not os.path.isfile(partial):
        if os.path.exists(partial):
            os.remove(partial)
        last = (child.stderr.strip().splitlines() or ["no output"])[-1]
        raise CompactionError(f"the JVM class-data archive could not be built (exit {child.returncode}): {last}")
    os.replace(partial, path)  # whole or absent: a JVM never maps a half-written archive
    print(
        f"jvm-archive: built {path} ({os.path.getsize(path) / 2**20:.0f} MiB) in {time.monotonic() - started:.0f} s",
        file=sys.stderr,
    )
    return path


def main(argv: list[str] | None = None) -> int:
    """Command line: build the archive (or, internally, run the workload that writes it)."""
    parser = argparse.ArgumentParser(
        prog="python -m compaction_assets.warm_start.jvm_archive",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--force", action="store_true", help="build it again even if it exists")
    parser.add_argument("--workload", help=argparse.SUPPRESS)
    parser.add_argument("--dump-to", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        if args.workload:
            workload(args.workload, args.dump_to)
        else:
            build(args.force)
    except CompactionError as exc:
        print(f"jvm-archive: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

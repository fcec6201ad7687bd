"""A process that runs one compaction_job for one log on a shared instance (tests/defs/test_pool.py):
Dagster runs of one instance in separate processes, as the daemon's run launcher starts them."""

import sys

import dagster as dg

from compaction_assets.definitions import defs


def main(instance_home: str, log: str, now_ms: str) -> int:
    """Run compaction_job for `log` on the instance kept in `instance_home`."""
    with dg.DagsterInstance.from_config(instance_home) as instance:
        result = defs.resolve_job_def("compaction_job").execute_in_process(
            partition_key=log,
            instance=instance,
            raise_on_error=False,
            run_config={
                "loggers": {"console": {"config": {"log_level": "WARNING"}}},
                "ops": {
                    "cleanable_range": {"config": {"now_ms": int(now_ms)}},
                    "compacted_log": {"config": {"now_ms": int(now_ms)}},
                },
            },
        )
    return 0 if result.success else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))

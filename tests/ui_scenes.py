"""What the UI test shows besides the demo's passing runs, made on the demo's instance with the real code.

    python -m tests.ui_scenes DIRTY_LOG BROKEN_LOG    (DAGSTER_HOME and COMPACTION_* as for the demo)

- DIRTY_LOG: the dirty-ratio sensor evaluated three times while records are appended between ticks; its
  observations are reported to the instance as a running sensor's would be (the asset's plot of
  `dirty_ratio`).
- BROKEN_LOG: a wrong cleaning (it decides right, then removes nothing: superseded records stay), made
  by replacing the cleaner's rewrite plan in this process only, then materialized with the checks: the
  blocking check `latest_value_per_key` fails and `latest_state` is not materialized.
Prints one JSON line: the observations reported and the failed checks.
"""

from __future__ import annotations

import json
import sys
import time


def _append(log_store, log: str, round_: int, keys: int = 5, per_key: int = 4) -> None:
    """Append `per_key` values for each of `keys` keys, sealed (so that a cleaning may take them)."""
    from compaction_assets.log import writer

    handle = log_store.handle(log)
    now = int(time.time() * 1000)
    writer.append(
        handle,
        log_store.config_for(log),
        [
            {"key": f"ui-scene-{k}", "value": f"r{round_}-v{i}", "timestamp": now + i}
            for i in range(per_key)
            for k in range(keys)
        ],
    )
    with handle.lock("append", purpose="roll"):  # as `compaction roll` seals it
        writer.roll(handle)


def main(dirty_log: str, broken_log: str) -> dict:
    """Make both scenes; what was reported and what failed."""
    import dagster as dg

    from compaction_assets.definitions import defs
    from compaction_assets.defs.checks import compacted_log_checks
    from tests.wrong_cleaning import store_cleaning_with, writes_nothing

    instance = dg.DagsterInstance.get()
    log_store = defs.resources["log_store"]
    sensor = defs.resolve_sensor_def("dirty_ratio_sensor")

    reported, cursor = 0, None
    for round_ in range(3):
        with dg.build_sensor_context(
            instance_ref=instance.get_ref(), definitions=defs, resources=defs.resources, cursor=cursor
        ) as context:
            tick = sensor.evaluate_tick(context)
        cursor = tick.cursor
        for event in tick.asset_events:
            if getattr(event, "partition", None) == dirty_log:
                instance.report_runless_asset_event(event)
                reported += 1
        _append(log_store, dirty_log, round_, keys=40, per_key=5)

    _append(log_store, broken_log, 0)
    # the wrong cleaning, handed to this run's resource (the code location's resources stay right)
    wrong = {**defs.resources, "log_store": store_cleaning_with(log_store, writes_nothing())}
    assets = [defs.get_assets_def(k) for k in ("raw_segments", "cleanable_range", "compacted_log", "latest_state")]
    result = dg.materialize(
        assets + [compacted_log_checks],
        partition_key=broken_log,
        instance=instance,
        resources=wrong,
        raise_on_error=False,
        tags={"source": "ui-test"},
        run_config={
            "ops": {"compacted_log": {"config": {"force": True}}},
            "loggers": {"console": {"config": {"log_level": "WARNING"}}},
        },
    )
    failed = sorted(c.check_name for c in result.get_asset_check_evaluations() if not c.passed)
    materialized = sorted(e.asset_key.path[-1] for e in result.get_asset_materialization_events())
    return {"observations": reported, "failed_checks": failed, "materialized": materialized}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2])))

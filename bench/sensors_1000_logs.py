"""Time the planner per log and one sensor evaluation over many logs (metadata only, no Spark).

    .venv/bin/python bench/sensors_1000_logs.py [--logs 1000]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import dagster as dg  # noqa: E402

from compaction_assets import log_ops  # noqa: E402
from compaction_assets.config import build_config  # noqa: E402
from compaction_assets.definitions import defs  # noqa: E402
from compaction_assets.partitions import log_partitions  # noqa: E402
from compaction_assets.planner import evaluate  # noqa: E402
from resources.log_store import LogStoreResource  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--logs", type=int, default=1000)
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="sensor-bench-")
    store = LogStoreResource(root=os.path.join(root, "store"), landing=os.path.join(root, "landing"),
                             topics_file=None)
    cfg = build_config({})
    names = [f"topic{i % 50}-{i // 50}" for i in range(args.logs)]
    t = time.monotonic()
    for i, name in enumerate(names):
        handle = store.handle(name)
        log_ops.append(handle, cfg, [{"key": f"k{j % 7}", "value": "v" * 50, "timestamp": 1000 + j}
                                     for j in range(20)])
        if i % 3:
            log_ops.roll(handle)
            log_ops.append(handle, cfg, [{"key": "k1", "value": "w", "timestamp": 5000}])
    print(f"built {len(names)} logs in {time.monotonic() - t:.1f}s")

    manifests = [store.handle(n).manifest() for n in names]
    t = time.perf_counter()
    for m in manifests:
        evaluate(m, cfg, 10_000)
    per_log = (time.perf_counter() - t) / len(manifests) * 1000
    t = time.perf_counter()
    for n in names:
        evaluate(store.handle(n).manifest(), cfg, 10_000)
    with_read = (time.perf_counter() - t) / len(names) * 1000
    print(f"planner: {per_log:.3f} ms per log from a manifest in memory; {with_read:.3f} ms including reading it")

    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(log_partitions.name, names)
        resources = {**defs.resources, "log_store": store}
        for sensor_name in ("dirty_ratio_sensor", "max_compaction_lag_sensor", "log_discovery_sensor"):
            sensor = defs.get_sensor_def(sensor_name)
            ctx = dg.build_sensor_context(instance_ref=instance.get_ref(), resources=resources, definitions=defs)
            t = time.monotonic()
            result = sensor.evaluate_tick(ctx)
            print(f"{sensor_name}: {time.monotonic() - t:.2f}s over {len(names)} logs, "
                  f"{len(result.run_requests)} run requests, {len(result.asset_events)} observations")


if __name__ == "__main__":
    main()

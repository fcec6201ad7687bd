"""Planner and sensor ticks over many logs (metadata only, no Spark); was bench/sensors_1000_logs.py.

    .venv/bin/python -m bench.sensors [--logs 1000] [--store local|s3] [--json OUT]

Builds `--logs` small logs (two thirds with a sealed segment and a record in the active one), each with a
landing folder whose one file is ingested, then times the planner per log (a manifest in memory, and
reading it from the store first) and one tick of each sensor over all the logs on a real (temporary)
Dagster instance: the discovery sensor twice, with nothing new (its tick every 5 s in the daemon) and
with a new file in every landing folder (it then requests batch runs). `bash bench/run.sh` runs this in a
subprocess and checks planner < 5 ms per log and every sensor tick < 5 s.

With `--store s3` the logs are built in a local folder as above, then copied, every file as it is, into a
bucket of a real S3 server started for the run (SeaweedFS on loopback, tests/s3_server.py), and the
store and landing area measured are that bucket's (docs/scaling.md: 10,000 logs).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time


def land(store, handle, cfg, log: str, file: str) -> None:
    """A landing file of two records for `log`; ingested when `handle` is given."""
    from compaction_assets.ingest.landing import ingest
    from compaction_assets.store.names import parse_log_name

    topic, partition = parse_log_name(log)
    folder = os.path.join(store.landing, topic, f"partition={partition}")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, file), "w") as f:
        f.write("".join(json.dumps({"key": f"k{j}", "value": "x", "timestamp": 6000 + j}) + "\n" for j in range(2)))
    if handle is not None:
        ingest(handle, cfg, folder)


def tick(defs, instance, resources: dict, sensor_name: str) -> dict:
    """One tick of a sensor: its seconds, run requests and observations."""
    import dagster as dg

    sensor = defs.resolve_sensor_def(sensor_name)
    # closed when done: the context enters an instance of its own, which must not outlive it
    with dg.build_sensor_context(instance_ref=instance.get_ref(), resources=resources, definitions=defs) as ctx:
        t = time.monotonic()
        result = sensor.evaluate_tick(ctx)
    return {
        "seconds": time.monotonic() - t,
        "run_requests": len(result.run_requests),
        "observations": len(result.asset_events),
    }


def _build(store, logs: int) -> tuple[list[str], float]:
    """`logs` small logs in `store` (two thirds with a sealed segment), each with an ingested landing file."""
    from compaction_assets.log import writer
    from compaction_assets.topics.config import build_config

    cfg = build_config({})
    names = [f"topic{i % 50}-{i // 50}" for i in range(logs)]
    t = time.monotonic()
    for i, name in enumerate(names):
        handle = store.handle(name)
        writer.append(handle, cfg, [{"key": f"k{j % 7}", "value": "v" * 50, "timestamp": 1000 + j} for j in range(20)])
        if i % 3:
            writer.roll(handle)
            writer.append(handle, cfg, [{"key": "k1", "value": "w", "timestamp": 5000}])
        land(store, handle, cfg, name, "0.jsonl")
        if (i + 1) % 1000 == 0:
            print(f"built {i + 1} of {logs} logs in {time.monotonic() - t:.0f}s", flush=True)
    return names, time.monotonic() - t


def _land_everywhere(store, cfg, names: list[str], server) -> None:
    """A new landing file for every log, in the local folder or (with `server`) the bucket, 16 at a time."""
    from concurrent.futures import ThreadPoolExecutor

    import pyarrow.fs as pafs

    from compaction_assets.store.names import parse_log_name

    if server is None:
        for name in names:
            land(store, None, cfg, name, "1.jsonl")
        return
    from tests.s3_server import ACCESS_KEY, REGION, SECRET_KEY

    fs = pafs.S3FileSystem(
        access_key=ACCESS_KEY, secret_key=SECRET_KEY, region=REGION, endpoint_override=server.endpoint
    )
    body = "".join(json.dumps({"key": f"k{j}", "value": "x", "timestamp": 7000 + j}) + "\n" for j in range(2))

    def put(name: str) -> None:
        topic, partition = parse_log_name(name)
        with fs.open_output_stream(f"{store.landing[len('s3://') :]}/{topic}/partition={partition}/1.jsonl") as out:
            out.write(body.encode())

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(put, names))


def _to_bucket(root: str, server) -> tuple[str, float]:
    """The store and landing folders under `root` copied into a new bucket of `server`, file by file, 32
    requests in flight (a copy of many small files is bound by requests, not bytes); the bucket's URI and
    the copy's seconds. The server's client variables are set for this process."""
    from concurrent.futures import ThreadPoolExecutor

    import pyarrow.fs as pafs

    from tests.s3_server import ACCESS_KEY, REGION, SECRET_KEY

    os.environ.update(server.env)
    bucket = server.new_bucket("scale")
    target = pafs.S3FileSystem(
        access_key=ACCESS_KEY, secret_key=SECRET_KEY, region=REGION, endpoint_override=server.endpoint
    )
    files = [
        os.path.relpath(os.path.join(folder, name), root)
        for top in ("store", "landing")
        for folder, _, names in os.walk(os.path.join(root, top))
        for name in names
    ]

    def put(relative: str) -> None:
        with open(os.path.join(root, relative), "rb") as source:
            data = source.read()
        with target.open_output_stream(f"{bucket}/{relative}") as out:
            out.write(data)

    t = time.monotonic()
    with ThreadPoolExecutor(32) as pool:
        list(pool.map(put, files))
    return f"s3://{bucket}", time.monotonic() - t


def measure(logs: int = 1000, root: str | None = None, s3_server=None) -> dict:
    import dagster as dg

    from compaction_assets.definitions import defs
    from compaction_assets.defs.partitions import log_partitions
    from compaction_assets.planning.planner import evaluate
    from compaction_assets.topics.config import build_config
    from resources.log_store import LogStoreResource

    own = root is None
    root = root or tempfile.mkdtemp(prefix="sensor-bench-")
    try:
        store = LogStoreResource(
            root=os.path.join(root, "store"), landing=os.path.join(root, "landing"), topics_file=None
        )
        cfg = build_config({})
        names, seconds = _build(store, logs)
        out: dict = {"logs": logs, "build_seconds": seconds, "store": "local"}
        if s3_server is not None:
            uri, out["copy_seconds"] = _to_bucket(root, s3_server)
            store = LogStoreResource(root=f"{uri}/store", landing=f"{uri}/landing", topics_file=None)
            out["store"] = "s3"
        t = time.perf_counter()
        listed = store.store.logs()
        out["list_logs_seconds"] = time.perf_counter() - t
        assert sorted(listed) == sorted(names), f"the store lists {len(listed)} logs, not the {len(names)} built"

        manifests = [store.handle(n).manifest() for n in names]
        t = time.perf_counter()
        for m in manifests:
            evaluate(m, cfg, 10_000)
        out["planner_ms_per_log_in_memory"] = (time.perf_counter() - t) / len(manifests) * 1000
        t = time.perf_counter()
        for n in names:
            evaluate(store.handle(n).manifest(), cfg, 10_000)
        out["planner_ms_per_log_with_read"] = (time.perf_counter() - t) / len(names) * 1000

        out["sensors"] = {}
        with dg.instance_for_test() as instance:
            instance.add_dynamic_partitions(log_partitions.name, names)
            resources = {**defs.resources, "log_store": store}
            for sensor_name in (
                "dirty_ratio_sensor",
                "max_compaction_lag_sensor",
                "log_discovery_sensor",
                "table_freshness_sensor",
            ):
                out["sensors"][sensor_name] = tick(defs, instance, resources, sensor_name)
            _land_everywhere(store, cfg, names, s3_server)  # a new file in each landing folder: batch runs asked
            out["sensors"]["log_discovery_sensor, new files everywhere"] = tick(
                defs, instance, resources, "log_discovery_sensor"
            )
        return out
    finally:
        if own:
            shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--logs", type=int, default=1000)
    ap.add_argument("--store", choices=("local", "s3"), default="local", help="where the measured store lives")
    ap.add_argument("--json", help="also write the figures as JSON to this file")
    args = ap.parse_args()
    if args.store == "s3":
        from tests.s3_server import start_s3_server

        server = start_s3_server()
        try:
            out = measure(args.logs, s3_server=server)
        finally:
            server.stop()
    else:
        out = measure(args.logs)
    print(f"built {out['logs']} logs in {out['build_seconds']:.1f}s; measured on the {out['store']} store")
    if "copy_seconds" in out:
        print(f"copied into the bucket in {out['copy_seconds']:.1f}s")
    print(f"listing the store's logs: {out['list_logs_seconds']:.2f}s")
    print(
        f"planner: {out['planner_ms_per_log_in_memory']:.3f} ms per log from a manifest in memory; "
        f"{out['planner_ms_per_log_with_read']:.3f} ms including reading it"
    )
    for name, s in out["sensors"].items():
        print(
            f"{name}: {s['seconds']:.2f}s over {out['logs']} logs, {s['run_requests']} run requests, "
            f"{s['observations']} observations"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()

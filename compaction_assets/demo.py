"""A realistic demo changelog: user profiles over 3 partitions, updates, deletes, late versioned records.

`write_landing` lays the files out as Kafka Connect sinks do: <landing>/<topic>/partition=<p>/<file>.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

BASE_TS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def _profile(rng: random.Random, user: int, version: int) -> str:
    return json.dumps({"user_id": user, "email": f"user{user}@example.com", "plan": rng.choice(
        ["free", "pro", "team"]), "country": rng.choice(["DE", "FR", "US", "BR", "IN", "JP"]),
        "version": version}, separators=(",", ":"))


def changelog(rng: random.Random, users: int, events: int, partition: int, versioned: bool) -> list[dict]:
    """Updates to random users, ~5% deletes; with `versioned`, 3% arrive late with an older version."""
    version = {u: 0 for u in range(users)}
    out = []
    ts = BASE_TS + partition * 1000
    for _ in range(events):
        user = rng.randrange(users)
        ts += rng.randint(1, 50)
        key = f"user-{partition}-{user}"
        deleted = rng.random() < 0.05
        if versioned and rng.random() < 0.03 and version[user] > 1:
            v = version[user] - rng.randint(1, version[user] - 1)  # a late, older version
        else:
            version[user] += 1
            v = version[user]
        rec = {"key": key, "value": None if deleted else _profile(rng, user, v), "timestamp": ts}
        if versioned:
            rec["headers"] = [["version", v]]
        out.append(rec)
    return out


def write_landing(landing: str | Path, *, seed: int = 7, users: int = 2000, events: int = 20000,
                  files_per_partition: int = 2) -> list[Path]:
    rng = random.Random(seed)
    written = []
    for topic, versioned in (("user-profiles", False), ("user-profiles-versioned", True)):
        for p in range(3 if not versioned else 1):
            records = changelog(rng, users, events // (3 if not versioned else 1), p, versioned)
            folder = Path(landing) / topic / f"partition={p}"
            folder.mkdir(parents=True, exist_ok=True)
            per = -(-len(records) // files_per_partition)
            for i in range(files_per_partition):
                chunk = records[i * per:(i + 1) * per]
                if i % 2 == 0:
                    path = folder / f"{topic}+{p}+{i * per:010d}.jsonl"
                    path.write_text("".join(json.dumps(r) + "\n" for r in chunk))
                else:
                    path = folder / f"{topic}+{p}+{i * per:010d}.parquet"
                    from .records import records_to_table
                    pq.write_table(records_to_table(chunk).drop(["offset"]), path)
                written.append(path)
    return written


def run_cli(ctx) -> int:
    """`compaction demo`: land files, append them, clean every eligible log, print a summary."""
    from . import engine, log_ops
    from .landing import read_input_file
    from .reader import latest_state_df

    landing = Path(ctx.args.store).parent / "landing"
    started = time.monotonic()
    files = write_landing(landing, events=ctx.args.records)
    before = after = 0
    for path in files:
        topic = path.parent.parent.name
        part = path.parent.name.split("=", 1)[1]
        handle = ctx.store.log(f"{topic}-{part}")
        res = log_ops.append(handle, ctx.config(handle.name), read_input_file(path), source=str(path))
        before += res.records
    now = max(BASE_TS + 10**9, int(time.time() * 1000))
    checks = []
    for name in ctx.store.logs():
        handle, cfg = ctx.store.log(name), ctx.config(name)
        log_ops.roll(handle)
        rep = engine.run(handle, cfg, now, spark=ctx.spark)
        m = handle.manifest()
        after += m.total_records
        state = latest_state_df(ctx.spark, handle, cfg).count()
        print(f"{name}: {rep.stats['records_read'] if rep.stats else 0} -> {m.total_records} records, "
              f"{state} keys in the latest state, reason {rep.reason}", file=sys.stderr)
        checks.append(rep.cleaned)
    print(json.dumps({"logs": len(checks), "records_before": before, "records_after": after,
                      "cleaned": sum(checks), "seconds": round(time.monotonic() - started, 1)}))
    return 0


if __name__ == "__main__":
    os.makedirs("var", exist_ok=True)
    write_landing(sys.argv[1] if len(sys.argv) > 1 else "var/landing")

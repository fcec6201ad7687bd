"""The demo's user-profile topics: a changelog of profile updates with ~5% deletes, `user-profiles` over 3
partitions and `user-profiles-versioned` (the `header` strategy, some records arriving late with an older
version), landed as a Kafka Connect sink writes them (<landing>/<topic>/partition=<p>/<file>, JSON Lines
and Parquet files in turn), beside the Debezium topic of demo/cdc.py."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pyarrow.parquet as pq

from compaction_assets.demo.cdc import write_cdc_landing

BASE_TS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def _profile(rng: random.Random, user: int, version: int) -> str:
    return json.dumps(
        {
            "user_id": user,
            "email": f"user{user}@example.com",
            "plan": rng.choice(["free", "pro", "team"]),
            "country": rng.choice(["DE", "FR", "US", "BR", "IN", "JP"]),
            "version": version,
        },
        separators=(",", ":"),
    )


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
        rec: dict[str, object] = {"key": key, "value": None if deleted else _profile(rng, user, v), "timestamp": ts}
        if versioned:
            rec["headers"] = [["version", v]]
        out.append(rec)
    return out


def write_landing(
    landing: str | Path, *, seed: int = 7, users: int = 2000, events: int = 20000, files_per_partition: int = 2
) -> list[Path]:
    """Write the demo's changelog files into the landing layout (Kafka Connect's)."""
    rng = random.Random(seed)
    written = []
    for topic, versioned in (("user-profiles", False), ("user-profiles-versioned", True)):
        for p in range(3 if not versioned else 1):
            records = changelog(rng, users, events // (3 if not versioned else 1), p, versioned)
            folder = Path(landing) / topic / f"partition={p}"
            folder.mkdir(parents=True, exist_ok=True)
            per = -(-len(records) // files_per_partition)
            for i in range(files_per_partition):
                chunk = records[i * per : (i + 1) * per]
                if i % 2 == 0:
                    path = folder / f"{topic}+{p}+{i * per:010d}.jsonl"
                    path.write_text("".join(json.dumps(r) + "\n" for r in chunk))
                else:
                    path = folder / f"{topic}+{p}+{i * per:010d}.parquet"
                    from compaction_assets.segments.records import records_to_table

                    pq.write_table(records_to_table(chunk).drop(["offset"]), path)
                written.append(path)
    return written + write_cdc_landing(landing)

"""A process of the table tests: `commit STORE LOG ROUNDS SEED` appends a random change to the log and
commits it to the topic's table, ROUNDS times (printing `COMMITTED <version>`); `batch STORE LOGS ROUNDS
SEED` does the same for several logs (comma-separated) as a batch does, each topic once a round
(`TopicBatch`); `clean-and-die STORE LOG` appends a change, cleans the log and is killed (SIGKILL) before
its table commit; `batch-and-die STORE LOGS` cleans several logs as a batch does, queues their states for
their topics' commits and is killed before them."""

from __future__ import annotations

import os
import random
import signal
import sys

from compaction_assets.cleaning import engine
from compaction_assets.store.log_store import LogStore
from compaction_assets.table.commit.commit import commit_log
from compaction_assets.table.commit.group import TopicBatch
from tests.table.helpers import CFG, put


def _change(handle, rng: random.Random, i: int) -> None:
    put(
        handle,
        {f"k{rng.randrange(40)}": (None if rng.random() < 0.2 else f"{handle.name}-{i}") for _ in range(10)},
        ts=i + 1,
    )


def _die_after_batch_cleaning(handles) -> None:
    """Clean the logs as a batch does (their states queued as each finishes), then die before the commits."""
    for h in handles:
        put(h, {"k1": "after-kill", "k2": None, "k-new": "new"}, ts=10)
    tables = TopicBatch(2**30)
    results = engine.run_many(
        [(h, CFG) for h in handles],
        10**6,
        force=True,
        concurrency=2,
        done=lambda r: tables.add(handles[[h.name for h in handles].index(r.log)], CFG),
    )
    assert all(r.error is None for r in results), results
    print("CLEANED " + ",".join(f"{h.name}={h.manifest().version}" for h in handles), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


def main(argv: list[str]) -> int:
    mode, location = argv[0], argv[1]
    store = LogStore(location, lock_ttl_s=10, gc_grace_s=0)
    handles = [store.log(name) for name in argv[2].split(",")]
    if mode == "clean-and-die":
        put(handles[0], {"k1": "after-kill", "k2": None, "k-new": "new"}, ts=10)
        engine.run(handles[0], CFG, 10**6, spark=None, force=True)
        print(f"CLEANED {handles[0].manifest().version}", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "batch-and-die":
        _die_after_batch_cleaning(handles)
    rounds, rng = int(argv[3]), random.Random(int(argv[4]))
    for i in range(rounds):
        for h in handles:
            _change(h, rng, i)
        if mode == "batch":
            tables = TopicBatch(2**30)
            for h in handles:
                tables.add(h, CFG)
            outcomes = tables.commit()
            print(
                " ".join(f"COMMITTED {o.result.log_version} {o.result.attempts}" for o in outcomes.values()), flush=True
            )
            continue
        result = commit_log(handles[0], CFG)
        print(f"COMMITTED {result.log_version} {result.attempts}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

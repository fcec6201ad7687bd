"""A process of the table tests: `commit STORE LOG ROUNDS SEED` appends a random change to the log and
commits it to the topic's table, ROUNDS times (printing `COMMITTED <version>`); `clean-and-die STORE LOG`
appends a change, cleans the log and is killed (SIGKILL) before its table commit."""

from __future__ import annotations

import os
import random
import signal
import sys

from compaction_assets.cleaning import engine
from compaction_assets.log.store import LogStore
from compaction_assets.table.commit import commit_log
from tests.table.helpers import CFG, put


def main(argv: list[str]) -> int:
    mode, location, log = argv[0], argv[1], argv[2]
    handle = LogStore(location, lock_ttl_s=10, gc_grace_s=0).log(log)
    if mode == "clean-and-die":
        put(handle, {"k1": "after-kill", "k2": None, "k-new": "new"}, ts=10)
        engine.run(handle, CFG, 10**6, spark=None, force=True)
        print(f"CLEANED {handle.manifest().version}", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    rounds, rng = int(argv[3]), random.Random(int(argv[4]))
    for i in range(rounds):
        put(handle, {f"k{rng.randrange(40)}": (None if rng.random() < 0.2 else f"{log}-{i}") for _ in range(10)}, ts=i + 1)
        result = commit_log(handle, CFG)
        print(f"COMMITTED {result.log_version} {result.attempts}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

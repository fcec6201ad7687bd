"""A writer process for the concurrent-commit tests: appends (under the append lease, retried while
another process holds it) interleaved with lease-free commits (checkpoint overwrites). Prints one line per
acknowledged change: `ACK <key>` for an appended record, `COMMIT <version>` (or `COMMIT append`) for every
version it wrote."""

from __future__ import annotations

import sys
import time

from compaction_assets.errors import LockedError
from compaction_assets.log import writer
from compaction_assets.store.log_store import LogStore
from compaction_assets.topics.config import build_config


def main(argv: list[str]) -> int:
    location, log_name, writer_id, rounds = argv[0], argv[1], argv[2], int(argv[3])
    handle = LogStore(location, lock_ttl_s=10).log(log_name)
    config = build_config({"segment.bytes": 400})
    for i in range(rounds):
        keys = [f"{writer_id}-{i}-{j}" for j in range(3)]
        while True:
            try:
                writer.append(handle, config, [{"key": k, "value": f"v{k}", "timestamp": 1000 + i} for k in keys])
                break
            except LockedError:
                time.sleep(0.02)
        for k in keys:
            print(f"ACK {k}", flush=True)
        print("COMMIT append", flush=True)  # an append of valid records commits exactly one version
        # A lease-free commit (it always commits) races with the others' appends and with each other.
        m = writer.set_checkpoint(handle, i)
        print(f"COMMIT {m.version}", flush=True)
    print("DONE", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""A producer that lands what Aiven's S3 sink writes: one flat object per flush,
`<topic>-<partition>-<start offset>` (its default file name template, no extension), JSON Lines of
`{key, value, offset, timestamp, headers}`, a tombstone's value null. An object appears whole or not at all
(one PUT, as the sink's upload); a PUT that failed (the S3 server killed) is tried again with the same
name and bytes until it lands, as the sink retries its flush. The ledger is every record of every file
landed, written before the PUT is first tried: a file once tried is always landed in the end."""

from __future__ import annotations

import json
import random
import threading
import time
from dataclasses import dataclass, field


@dataclass
class Ledger:
    """Per log, every landed record by offset: (key, value) as bytes, value None for a tombstone."""

    records: dict[str, dict[int, tuple[bytes, bytes | None]]] = field(default_factory=dict)
    files: int = 0
    tombstones: int = 0

    def count(self) -> int:
        return sum(len(r) for r in self.records.values())

    def next_offset(self, log: str) -> int:
        return len(self.records.get(log, {}))  # offsets start at 0 and have no gaps here

    def latest(self, log: str) -> dict[bytes, tuple[int, bytes | None]]:
        """The dedup (offset strategy): each key's record of the highest offset, tombstones included."""
        out: dict[bytes, tuple[int, bytes | None]] = {}
        for offset in sorted(self.records.get(log, {})):
            key, value = self.records[log][offset]
            out[key] = (offset, value)
        return out


def s3_filesystem(env: dict[str, str]):
    import pyarrow.fs as pafs

    return pafs.S3FileSystem(
        access_key=env["AWS_ACCESS_KEY_ID"],
        secret_key=env["AWS_SECRET_ACCESS_KEY"],
        region=env["AWS_REGION"],
        endpoint_override=env["AWS_ENDPOINT_URL"],
        connect_timeout=2,
        request_timeout=10,
    )


class Producer(threading.Thread):
    """Lands a file every `pace_s` (on average) into a random partition until `stop` is set."""

    def __init__(self, env: dict[str, str], landing_uri: str, partitions: dict[str, int], seed: int, pace_s=1.0):
        super().__init__(name="soak-producer", daemon=True)
        self.fs = s3_filesystem(env)
        self.root = landing_uri.removeprefix("s3://")
        self.logs = [f"{topic}-{p}" for topic, n in partitions.items() for p in range(n)]
        self.rng = random.Random(seed)
        self.pace_s = pace_s
        self.ledger = Ledger()
        self.stop = threading.Event()
        self.retries = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                self.land_one()
                self.stop.wait(self.rng.uniform(0, 2 * self.pace_s))
        except BaseException as exc:  # the soak reports it
            self.error = exc

    def batch(self, log: str, start: int) -> list[dict]:
        """20-80 records over 60 keys a log (many superseded), a tenth of them tombstones; every value
        unique (its log and offset), so a record shown twice or in the wrong place cannot pass for another."""
        now = int(time.time() * 1000)
        rows = []
        for i in range(self.rng.randrange(20, 80)):
            key = f"k{self.rng.randrange(60):02d}"
            value = None if self.rng.random() < 0.1 else f"{log}@{start + i}:" + "v" * self.rng.randrange(40)
            rows.append({"key": key, "value": value, "offset": start + i, "timestamp": now + i, "headers": []})
        return rows

    def land_one(self) -> None:
        log = self.rng.choice(self.logs)
        start = self.ledger.next_offset(log)
        rows = self.batch(log, start)
        entries = self.ledger.records.setdefault(log, {})
        for row in rows:
            value = None if row["value"] is None else row["value"].encode()
            entries[row["offset"]] = (row["key"].encode(), value)
            self.ledger.tombstones += value is None
        self.ledger.files += 1
        data = "".join(json.dumps(row) + "\n" for row in rows).encode()
        self.put(f"{self.root}/{log}-{start}", data)

    def put(self, path: str, data: bytes, give_up_s: float = 600.0) -> None:
        """One PUT, tried again until it lands (the S3 server may be down for a minute or two); an S3 server
        down for `give_up_s` is the soak's failure, not a wait without end."""
        deadline = time.monotonic() + give_up_s
        while True:
            try:
                with self.fs.open_output_stream(path) as out:
                    out.write(data)
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                self.retries += 1
                time.sleep(1.0)

"""Seeded log generation: the benchmark's logs, built with the project's own append path.

Records: `key` = b"key-" + 10 digits (14 bytes), drawn uniformly from the case's key space; `value` =
random bytes of the case's size (incompressible, so file sizes follow the logical sizes), null for a
tombstone (5% of records); `timestamp` = 1 ms apart, from 2023-11-14. Offsets are assigned by the
append. The same (records, keys, value size, seed) always gives the same log.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from compaction_assets.log import writer
from compaction_assets.topics.config import TopicConfig, build_config

TS0 = 1_700_000_000_000
NOW = 1_800_000_000_000  # the clock every cleaning of the benchmark uses (after every record)
KEY_BYTES = 14
TOMBSTONE_FRACTION = 0.05


def topic_config(segment_bytes: int) -> TopicConfig:
    """Kafka's defaults (offset strategy, delete.retention.ms 1 day) with the benchmark's segment size."""
    return build_config({"segment.bytes": segment_bytes})


def key_array(ids: np.ndarray) -> pa.Array:
    n = len(ids)
    digits = (ids[:, None] // (10 ** np.arange(9, -1, -1, dtype=np.int64))) % 10 + 48
    data = np.empty((n, KEY_BYTES), dtype=np.uint8)
    data[:, :4] = np.frombuffer(b"key-", np.uint8)
    data[:, 4:] = digits.astype(np.uint8)
    offsets = np.arange(0, KEY_BYTES * (n + 1), KEY_BYTES, dtype=np.int32)
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data.ravel())])


def value_array(rng: np.random.Generator, tomb: np.ndarray, value_bytes: int) -> pa.Array:
    n = len(tomb)
    lengths = np.where(tomb, 0, value_bytes).astype(np.int64)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    data = rng.bytes(int(offsets[-1]))
    validity = np.packbits(~tomb, bitorder="little")
    arr = pa.Array.from_buffers(
        pa.large_binary(),
        n,
        [pa.py_buffer(validity), pa.py_buffer(offsets), pa.py_buffer(data)],
        null_count=int(tomb.sum()),
    )
    return arr.cast(pa.binary())


def batch(rng: np.random.Generator, key_ids: np.ndarray, value_bytes: int, ts_start: int) -> pa.Table:
    n = len(key_ids)
    tomb = rng.random(n) < TOMBSTONE_FRACTION
    return pa.table(
        {
            "key": key_array(key_ids),
            "value": value_array(rng, tomb, value_bytes),
            "timestamp": pa.array(ts_start + np.arange(n, dtype=np.int64), pa.int64()),
        }
    )


def chunk_records(value_bytes: int, segment_bytes: int) -> int:
    """Records per append: about one segment's worth (one file per segment, as a landing file would)."""
    return int(max(1_000, min(500_000, segment_bytes // (16 + KEY_BYTES + value_bytes))))


def generate(handle, cfg: TopicConfig, records: int, keys: int, value_bytes: int, seed: int) -> None:
    """A fresh log of `records` records over `keys` keys; all sealed (the active segment is empty)."""
    rng = np.random.default_rng([seed, records, keys, value_bytes])
    chunk = chunk_records(value_bytes, cfg.segment_bytes)
    for start in range(0, records, chunk):
        n = min(chunk, records - start)
        writer.append(handle, cfg, batch(rng, rng.integers(0, keys, n), value_bytes, TS0 + start))
    writer.roll(handle)


def update_batches(
    log_end_offset: int,
    cfg: TopicConfig,
    new_records: int,
    keys: int,
    value_bytes: int,
    seed: int,
    new_key_fraction: float = 0.1,
) -> Iterator[pa.Table]:
    """`new_records` records after a log ending at `log_end_offset`, about one segment's worth a batch:
    90% update random existing keys ([0, keys)), 10% add keys never seen ([keys, ...)); 5% tombstones."""
    rng = np.random.default_rng([seed, 7, new_records, keys, value_bytes])
    ts_start = TS0 + log_end_offset
    chunk = chunk_records(value_bytes, cfg.segment_bytes)
    fresh = keys
    for start in range(0, new_records, chunk):
        n = min(chunk, new_records - start)
        ids = rng.integers(0, keys, n)
        new = rng.random(n) < new_key_fraction
        ids[new] = fresh + np.arange(int(new.sum()))
        fresh += int(new.sum())
        yield batch(rng, ids, value_bytes, ts_start + start)


def append_updates(
    handle, cfg: TopicConfig, new_records: int, keys: int, value_bytes: int, seed: int, new_key_fraction: float = 0.1
) -> None:
    """Append `update_batches` to a log, then seal them (the active segment is empty again)."""
    end = handle.manifest().log_end_offset
    for part in update_batches(end, cfg, new_records, keys, value_bytes, seed, new_key_fraction):
        writer.append(handle, cfg, part)
    writer.roll(handle)


def write_updates(
    path: str, log_end_offset: int, cfg: TopicConfig, new_records: int, keys: int, value_bytes: int, seed: int
) -> int:
    """The records `append_updates` would append, written as one Parquet landing file instead (the record
    format of `compaction append` and `ingest`: key, value, timestamp); returns its records."""
    change = pa.concat_tables(update_batches(log_end_offset, cfg, new_records, keys, value_bytes, seed))
    pq.write_table(change, path)
    return change.num_rows

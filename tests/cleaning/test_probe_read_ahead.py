"""The probe reads ahead while the newer records' keys are being found (cleaning/decide/probe_task.py): what it
finds is the same however many rows it held before the keys were there, and wherever a batch ends."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from compaction_assets.cleaning.decide.probe_task import KeysWhenAsked, ProbeSpec, probe_segments
from compaction_assets.segments.records import SEGMENT_SCHEMA

NOW = 10_000


class KeysAfter:
    """Newer keys that are not ready for the first `waits` questions (as while Spark still groups them)."""

    def __init__(self, keys: pa.Array, waits: int):
        self.keys, self.waits, self.asked = KeysWhenAsked(keys), waits, 0

    def ready(self) -> bool:
        self.asked += 1
        return self.asked > self.waits

    def get(self):
        return self.keys.get()


def _segment(path: str, first: int, rows: int) -> ProbeSpec:
    offsets = np.arange(first, first + rows, dtype=np.int64)
    tomb = offsets % 7 == 0
    pq.write_table(
        pa.table(
            {
                "offset": offsets,
                "key": [b"key-%d" % o for o in offsets.tolist()],
                "value": pa.array([None if t else b"v" for t in tomb.tolist()], pa.binary()),
                "timestamp": offsets * 3,
                "headers": pa.nulls(rows, SEGMENT_SCHEMA.field("headers").type),
                # tombstones: some past their horizon, some not, some without one
                "delete_horizon": pa.array(
                    [
                        ((int(o) % 300) * 50 if o % 3 else None) if t else None
                        for o, t in zip(offsets.tolist(), tomb.tolist())
                    ],
                    pa.int64(),
                ),
                "record_size": offsets % 40 + 10,
                "is_tombstone": tomb,
            },
            schema=SEGMENT_SCHEMA,
        ),
        path,
    )
    dead = offsets[offsets % 11 == 5]  # the deletion vector's entries of this segment
    return ProbeSpec(first // 1000, ((path, None),), 0, dead, rows)


@pytest.mark.parametrize(
    "batch_rows, read_ahead_rows, waits", [(7, 0, 0), (7, 50, 3), (7, 10_000, 1_000), (64, 130, 2), (1, 1, 5)]
)
def test_reading_ahead_finds_what_testing_each_batch_at_once_finds(tmp_path, batch_rows, read_ahead_rows, waits):
    specs = [_segment(str(tmp_path / f"seg-{n}.parquet"), n * 1000, rows) for n, rows in enumerate((300, 41, 170))]
    newer = pa.array([b"key-%d" % o for o in (3, 5, 14, 299, 1000, 1040, 2001, 2169, 99_999)], pa.binary())
    fs = pafs.LocalFileSystem()

    expected = probe_segments(specs, KeysWhenAsked(newer), NOW, 777, fs, batch_rows=1_000)
    got = probe_segments(iter(specs), KeysAfter(newer, waits), NOW, 777, fs, batch_rows, read_ahead_rows)

    assert [seg for seg, _, _ in got] == [seg for seg, _, _ in expected] == [0, 1, 2]
    for (_, removed, figures), (_, removed_expected, figures_expected) in zip(got, expected):
        assert np.array_equal(removed, removed_expected)
        assert figures == figures_expected
    removed = np.concatenate([r for _, r, _ in got])
    # superseded (a key of the newer records, unless the vector already holds it) and expired tombstones
    assert {3, 14, 299, 1000, 1040, 2001, 2169} <= set(removed.tolist()) and 5 not in removed
    # tombstones past their horizon removed; kept ones with a horizon and without (stamped by this cleaning)
    assert all(f["removed_tomb"] and f["horizons"] and f["stamped"] for _, _, f in got)

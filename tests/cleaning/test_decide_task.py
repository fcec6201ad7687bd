"""The decision made in the group-by's tasks (cleaning/decide/task.py) comes back whole: every kept offset
with its segment and every task's figures, however the job's results are cut into chunks."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from compaction_assets.cleaning.decide.task import (
    arrow_figures,
    decision_runner,
    kept_offsets,
    offset_decision,
    task_results,
)

NOW = 10**12
STARTS = [(0, 0), (1, 100), (2, 250)]  # three segments: [0, 100), [100, 250), [250, ...)


def _winners(offsets: list[int]) -> pa.Table:
    """Winners at `offsets`: every third a tombstone, half of those with a horizon already passed."""
    tomb = [o % 3 == 0 for o in offsets]
    horizon = [(NOW - 1 if o % 2 else None) if t else None for o, t in zip(offsets, tomb)]
    return pa.table(
        {
            "offset": pa.array(offsets, pa.int64()),
            "tomb": pa.array(tomb),
            "delete_horizon": pa.array(horizon, pa.int64()),
            "size": pa.array([10 + o for o in offsets], pa.int64()),
            "timestamp": pa.array([1000 + o for o in offsets], pa.int64()),
        }
    )


def test_the_tasks_results_give_back_every_kept_offset_and_figure():
    tasks = [list(range(0, 300, 4)), list(range(1, 300, 4)), list(range(2, 300, 2))]
    runner = decision_runner(STARTS, NOW, NOW + 5)
    parts = [pa.Table.from_batches(list(runner(iter(_winners(t).to_batches(max_chunksize=40))))) for t in tasks]
    # the job's results as a client receives them: several chunks, one cut inside a task's rows
    result = pa.concat_tables([parts[0], pa.concat_tables(parts[1:]).combine_chunks()])
    rows, kept = task_results(pa.concat_tables([result.slice(0, 2), result.slice(2)]))
    whole = offset_decision(_winners(sorted(o for t in tasks for o in t)), STARTS, NOW, NOW + 5)
    expected = kept_offsets(whole)
    assert 0 < len(expected) < len(whole)  # some tombstones expired
    assert sorted(zip(kept.column("offset").to_pylist(), kept.column("seg_idx").to_pylist())) == sorted(
        zip(expected.column("offset").to_pylist(), expected.column("seg_idx").to_pylist())
    )
    assert kept.schema == pa.schema([("offset", pa.int64()), ("seg_idx", pa.int32())])
    # each task's figures, which segment_figures adds up: the same sums as the whole table's
    whole_rows = arrow_figures(whole)
    for name in ("kept", "kept_bytes", "tombstones", "removed_tomb"):
        by_task = {i: sum(r[name] for r in rows if r["seg_idx"] == i) for i, _ in STARTS}
        assert by_task == {i: sum(r[name] for r in whole_rows if r["seg_idx"] == i) for i, _ in STARTS}, name
    assert {r["seg_idx"] for r in rows} == {0, 1, 2} and len(rows) > 3  # several tasks' rows per segment


def test_a_task_without_winners_yields_nothing():
    assert list(decision_runner(STARTS, NOW, NOW + 5)(iter([]))) == []
    rows, kept = task_results(
        pa.table(
            {
                "seg_idx": pa.array([], pa.int32()),
                "offsets": pa.array([], pa.binary()),
                "figures": pa.array([], pa.string()),
            }
        )
    )
    assert rows == [] and len(kept) == 0 and kept.column("offset").type == pa.int64()
    assert np.asarray(kept.column("seg_idx")).dtype == np.int32

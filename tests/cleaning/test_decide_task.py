"""The decision made in the group-by's tasks (cleaning/decide/arrow_decision.py) comes back whole: every kept
offset with its segment and every task's figures, however the job's results are cut into chunks; and the
task function runs where the product is not installed (a cluster's Python workers)."""

from __future__ import annotations

import pickle
import subprocess
import sys

import numpy as np
import pyarrow as pa

from compaction_assets.cleaning.decide import arrow_decision
from compaction_assets.cleaning.decide.arrow_decision import (
    arrow_figures,
    decision_runner,
    kept_offsets,
    offset_decision,
    task_results,
)
from compaction_assets.log.spark_reads import ship_by_value

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


# a Python worker of a cluster: pyarrow and numpy, and no import of the product at all
_WORKER = """
import pickle, sys

class NoProduct:
    def find_spec(self, name, path=None, target=None):
        if name == "compaction_assets" or name.startswith("compaction_assets."):
            raise ImportError("the product is not installed on a worker: " + name)

sys.meta_path.insert(0, NoProduct())
shipped, winners = pickle.loads(sys.stdin.buffer.read())
runner = pickle.loads(shipped)
rows = [batch for batch in runner(iter(winners.to_batches()))]
sys.stdout.buffer.write(pickle.dumps(rows))
"""


def test_the_task_function_runs_where_the_product_is_not_installed():
    """The module also reads a range in this process (log/reader.py, the store): shipped by value, its task
    function takes only the globals it names, all of them pyarrow, numpy and segments/arrays.py."""
    from pyspark import cloudpickle

    ship_by_value(arrow_decision)
    runner = decision_runner(STARTS, NOW, NOW + 5)
    winners = _winners(list(range(0, 300, 3)))
    shipped = pickle.dumps((cloudpickle.dumps(runner), winners))
    worker = subprocess.run(
        [sys.executable, "-c", _WORKER],
        input=shipped,
        capture_output=True,
        cwd="/",
        check=False,
    )
    assert worker.returncode == 0, worker.stderr.decode()[-2000:]
    there = pa.Table.from_batches(pickle.loads(worker.stdout))
    here = pa.Table.from_batches(list(runner(iter(winners.to_batches()))))
    assert there.equals(here) and there.num_rows > 1

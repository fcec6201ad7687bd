"""A table commit past the in-process bound (COMPACTION_TABLE_MAX_STATE_BYTES) has its change found and written by
Spark tasks (table/commit/spark_change.py) and gives the table the same rows and its snapshots the same summaries
as the commit that builds the latest state here, for every compaction strategy, over a history of a first
commit, updates, tombstones, late records, a cleaning that drops expired tombstones and a log-start move."""

from __future__ import annotations

import pytest

from compaction_assets.cleaning import engine
from compaction_assets.ingest.landing import ingest, landing_logs
from compaction_assets.log import writer
from compaction_assets.store.log_store import LogStore
from compaction_assets.table.commit.commit import CommitResult, commit_log
from compaction_assets.table.commit.group import TopicBatch
from compaction_assets.table.reading.read import open_table, scan
from compaction_assets.topics.config import build_config
from tests.log.connectors.sinks import write_lines

TOMBSTONES_EXPIRE = {"delete.retention.ms": 50, "segment.bytes": 4000, "min.cleanable.dirty.ratio": 0.0}
STRATEGIES = {
    "offset": {},
    "timestamp": {"compaction.strategy": "timestamp"},
    "header": {"compaction.strategy": "header", "compaction.strategy.header": "version"},
}
# the snapshot summary's figures both paths must agree on (the data and delete files' counts depend on how
# many tasks wrote them)
FIGURES = ("added-records", "total-records", "added-position-deletes", "total-position-deletes")
RESULT_FIELDS = ("committed", "log_version", "rows_added", "rows_deleted", "rows_masked", "records_read", "from_tail")


def _put(handle, config, records: list[tuple[str, str | None, int]]) -> None:
    """Append (key, value or None, time) records, the time also their `version` header."""
    rows = [{"key": k, "value": v, "timestamp": t, "headers": [["version", str(t)]]} for k, v, t in records]
    writer.append(handle, config, rows)


def _steps(handle, config):
    """The history, a commit after each step: yields after each step so that the caller commits."""
    _put(handle, config, [(f"k{i}", f"v{i}", 100 + i) for i in range(300)])
    yield "first"
    updates = [(f"k{i}", f"w{i}", 1000 + i) for i in range(20)] + [(f"k{i}", None, 1000 + i) for i in range(20, 30)]
    late = [(f"k{i}", "late", 1) for i in range(30, 35)]  # older by time and version: they lose but under offset
    _put(handle, config, updates + late + [(f"new{i}", f"n{i}", 1000) for i in range(5)])
    yield "change"
    engine.run(handle, config, 1_000_000, spark=None, force=True)  # expired tombstones dropped: a removal
    _put(handle, config, [("k40", "x", 2000), ("k41", None, 2000)])
    yield "cleaned"
    manifest = handle.manifest()
    writer.set_log_start(handle, manifest.log_start_offset + 50)
    yield "log start moved"


def _table(handle) -> tuple[list[dict], dict[str, str]]:
    """The log's rows of its topic's table (by key) and the current snapshot's summary properties."""
    table, _ = open_table(handle.st, "users")
    rows = sorted(scan(table, None, 0).to_pylist(), key=lambda r: r["key"])
    summary = table.current_snapshot().summary
    figures = {k: summary[k] for k in FIGURES if k in summary}
    return rows, {**{k: v for k, v in summary.additional_properties.items() if k.startswith("compaction.")}, **figures}


def _history(root: str, config, monkeypatch, bound: str) -> list[tuple[str, CommitResult, list[dict], dict]]:
    monkeypatch.setenv("COMPACTION_TABLE_MAX_STATE_BYTES", bound)
    handle = LogStore(root, gc_grace_s=0).log("users-0")
    out = []
    for step in _steps(handle, config):
        result = commit_log(handle, config, now=2_000_000)
        out.append((step, result, *_table(handle)))
    return out


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_spark_tasks_commit_what_the_process_commits(strategy, tmp_path, monkeypatch, spark):
    config = build_config({**TOMBSTONES_EXPIRE, **STRATEGIES[strategy]})
    here = _history(str(tmp_path / "here"), config, monkeypatch, str(1 << 30))
    there = _history(str(tmp_path / "there"), config, monkeypatch, "1")  # every log past the bound
    for (step, mine, rows, summary), (_, theirs, spark_rows, spark_summary) in zip(here, there):
        assert rows == spark_rows, (strategy, step)
        assert summary == spark_summary, (strategy, step)
        assert [getattr(mine, f) for f in RESULT_FIELDS] == [getattr(theirs, f) for f in RESULT_FIELDS], step
        assert theirs.path == ("tail" if mine.from_tail else "spark"), (step, theirs.why)
        assert mine.path == ("tail" if mine.from_tail else "in-process"), (step, mine.why)
        if theirs.path == "spark":
            assert "past COMPACTION_TABLE_MAX_STATE_BYTES" in theirs.why
    masked = [r.rows_masked for _, r, _, _ in there if r.path == "spark"]
    assert len(masked) >= 2 and any(masked)  # the Spark path masked old rows, not only wrote new ones
    assert any(r.rows_deleted for _, r, _, _ in there if r.path == "spark")


def test_a_batch_queues_a_log_past_the_bound_without_its_state(store, monkeypatch, spark):
    monkeypatch.setenv("COMPACTION_TABLE_MAX_STATE_BYTES", "1")
    config = build_config({})
    big, small = store.log("users-0"), store.log("users-1")
    _put(big, config, [(f"k{i}", f"v{i}", 1) for i in range(50)])
    _put(small, config, [("a", "1", 1)])
    tables = TopicBatch(2**30)
    tables.add(big, config)
    tables.add(small, config)
    outcomes = tables.commit()
    assert {log: o.result.path for log, o in outcomes.items() if o.result} == {"users-0": "spark", "users-1": "spark"}
    assert outcomes["users-0"].result.rows_added == 50 and outcomes["users-0"].result.log_versions == {
        "users-0": 1,
        "users-1": 1,
    }


def _structured(root, landing, monkeypatch, bound: str) -> list[tuple[str, list[dict]]]:
    """Records with structured values (their fields become columns) committed twice, a new field the second
    time (the table's schema evolves): each commit's path and the table's rows after it."""
    monkeypatch.setenv("COMPACTION_TABLE_MAX_STATE_BYTES", bound)
    config = build_config({"landing.format": "aiven", "compaction.strategy": "timestamp"})
    handle = LogStore(str(root), gc_grace_s=0).log("users-0")
    out = []
    for name, records in (
        (
            "users-0-0.jsonl",
            [
                {"key": {"id": 1}, "value": {"email": "a@x", "age": 3, "partition": "p"}, "offset": 0, "timestamp": 1},
                {"key": {"id": 2}, "value": {"email": "b@x", "age": 4}, "offset": 1, "timestamp": 1},
                {"key": {"id": 3}, "value": "not an object", "offset": 2, "timestamp": 1},
            ],
        ),
        (
            "users-0-3.jsonl",
            [{"key": {"id": 2}, "value": {"email": "b2@x", "plan": "pro"}, "offset": 3, "timestamp": 2}],
        ),
    ):
        write_lines(landing / name, records)
        ingest(handle, config, landing_logs(landing)[0]["users-0"])
        result = commit_log(handle, config)
        out.append((result.path, _table(handle)[0]))
    return out


def test_structured_values_become_the_same_columns_through_spark_tasks(tmp_path, monkeypatch, spark):
    here = _structured(tmp_path / "here", tmp_path / "landing-here", monkeypatch, str(1 << 30))
    there = _structured(tmp_path / "there", tmp_path / "landing-there", monkeypatch, "1")
    assert [path for path, _ in here] == ["in-process"] * 2 and [path for path, _ in there] == ["spark"] * 2
    assert [rows for _, rows in here] == [rows for _, rows in there]
    assert {"email", "age", "value_partition", "plan"} <= set(there[-1][1][0])


def test_headers_sent_to_the_writers_as_json_come_back_as_the_same_lists(spark):
    """The data writers get the headers as Spark's `to_json` text (its Arrow writer is slow on lists of
    structs) and rebuild the list: null, empty, a null value and bytes that are not UTF-8 survive."""
    import pyarrow as pa
    from pyspark.sql import functions as F

    from compaction_assets.table.commit.spark_tasks import headers_from_json
    from compaction_assets.table.schema import HEADER_TYPE

    headers = [
        None,
        [],
        [{"name": "v", "value": b"\x00\xff"}, {"name": "n", "value": None}],
        [{"name": "é", "value": b""}],
    ]
    rows = pa.table({"key": [b"a", b"b", b"c", b"d"], "headers": pa.array(headers, pa.list_(HEADER_TYPE))})
    sent = spark.createDataFrame(rows.to_pandas()).withColumn("headers", F.to_json("headers")).orderBy("key").toArrow()
    assert pa.types.is_string(sent.column("headers").type)
    assert headers_from_json(sent).column("headers").to_pylist() == headers

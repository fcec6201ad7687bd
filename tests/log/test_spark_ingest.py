"""An ingestion on the Spark route (ingest/spark_units.py) pinned to the same ingestion in this process: the
same stored records, offsets, timestamps, segments, bytes and manifest `ingested` names, the same one-line
refusal of a malformed file with nothing of it written, for native JSON Lines and Avro and the Confluent
Avro and Aiven JSON layouts; a fault of the machine in the middle of the backlog leaves the units before it
committed and a rerun finishes exactly once. Spark is the test session's local one (tests/conftest.py);
several windows of units (two a core) so that the next window is built while this one is committed."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from compaction_assets.errors import InvalidInputError
from compaction_assets.ingest.formats.canonical import SCHEMA_FILE
from compaction_assets.ingest.landing import ingest, landing_logs
from compaction_assets.ingest.route import IN_PROCESS, SPARK, SparkOffer, ingest_route
from compaction_assets.ingest.spark_units import STAGE_PREFIX
from compaction_assets.log.reader import iter_records
from compaction_assets.store.log_store import LogStore
from compaction_assets.topics.config import build_config
from tests.log.connectors.sinks import write_lines
from tests.log.connectors.test_confluent import AVRO_CFG, avro_users, tombstones
from tests.log.connectors.test_streamed_group import CFG as STREAMED_CFG
from tests.log.connectors.test_streamed_group import _land
from tests.log.test_avro import records as avro_records
from tests.log.test_avro import write_avro
from tests.log.test_ingest_faults import LOG, Ingestion, as_tuples, write_kill_landing
from tests.log.test_store_faults import (
    check_layout,
    only_referenced_data_left,
    referenced_files_exist,
    wait_lease_expiry,
)

FILES = 9  # three windows of units on the test session's two cores
ROWS = 40
GiB = 1 << 30


def native_jsonl(root: Path) -> str:
    folder = root / "users" / "partition=0"
    folder.mkdir(parents=True)
    for f in range(FILES):
        rows = [
            {
                "key": f"u{(f * ROWS + i) % 13}",
                "value": None if i % 9 == 4 else json.dumps({"n": f * ROWS + i, "name": "é☃"}),
                "timestamp": 1_000 + f * ROWS + i,
                "headers": [["src", f"f{f}"]] if i % 3 == 0 else [],
            }
            for i in range(ROWS)
        ]
        write_lines(folder / f"part-{f:04d}.jsonl", rows)
    return "users-0"


def native_avro(root: Path) -> str:
    folder = root / "users" / "partition=0"
    folder.mkdir(parents=True)
    for f in range(FILES):
        write_avro(folder / f"users+0+{f * ROWS:010d}.avro", avro_records(ROWS, start=f * ROWS), codec="deflate")
    return "users-0"


def confluent_avro(root: Path) -> str:
    for f in range(FILES):
        first = f * ROWS
        avro_users(root, first, [(i % 7, f"{f}-{i}@x", first + i) for i in range(ROWS)])
    # a tombstone file's offsets reach to the next tombstone file's: the last one groups what follows it
    tombstones(root, FILES * ROWS, [3])
    return "users-0"


def aiven_jsonl(root: Path) -> str:
    for f in range(FILES):
        rows = [
            {
                "key": f"u{i % 5}",
                "value": None if i % 8 == 7 else {"email": f"{f}-{i}@x", "age": i},
                "offset": f * ROWS + i,
                "timestamp": 1_700_000_000_000 + f * ROWS + i,
                "headers": [{"key": "h", "value": str(i)}],
            }
            for i in range(ROWS)
        ]
        write_lines(root / f"users-0-{f * ROWS}.jsonl", rows)
    return "users-0"


LAYOUTS: dict[str, tuple[Callable[[Path], str], dict]] = {
    "native-jsonl": (native_jsonl, {}),
    "native-avro": (native_avro, {}),
    "confluent-avro": (confluent_avro, AVRO_CFG),
    "aiven-jsonl": (aiven_jsonl, {"landing.format": "aiven"}),
}


def _damage(path: Path) -> None:
    """A block in the middle of the file overwritten (a torn upload): a malformed line, corrupt Avro."""
    data = bytearray(path.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 40] = b"\x13" * 40
    path.write_bytes(bytes(data))


def _middle_file(root: Path, layout: str) -> Path:
    """The value file holding the backlog's fifth file's records (the second window's first)."""
    names = {
        "native-jsonl": "users/partition=0/part-0004.jsonl",
        "native-avro": f"users/partition=0/users+0+{4 * ROWS:010d}.avro",
        "confluent-avro": f"users/partition=0/users+0+{4 * ROWS:010d}.avro",
        "aiven-jsonl": f"users-0-{4 * ROWS}.jsonl",
    }
    return root / names[layout]


def _stored(store: LogStore, log: str) -> dict:
    """What an ingestion leaves: records, segments, bytes, names, the value schema, and no stage."""
    handle = store.log(log)
    m = handle.manifest()
    schema = Path(handle.path(SCHEMA_FILE))
    return {
        "records": [(r.offset, r.key, r.value, r.timestamp, list(r.headers)) for r in iter_records(handle)],
        "segments": [(s.base_offset, s.next_offset, s.records, s.size, s.min_ts, s.max_ts) for s in m.segments],
        "bytes": (m.total_size, m.log_end_offset, m.invalid_records),
        "ingested": m.ingested,
        "schema": schema.read_text() if schema.exists() else None,
        "stages": [p.name for p in Path(handle.path("data")).glob(STAGE_PREFIX + "*")],
    }


def _ingest(tmp_path: Path, name: str, root: Path, log: str, cfg: dict, offer: SparkOffer | None):
    """One ingestion into its own store: (its report or its refusal, what it stored)."""
    store = LogStore(str(tmp_path / name), gc_grace_s=0)
    try:
        outcome: object = ingest(store.log(log), build_config(cfg), landing_logs(root)[0][log], spark=offer)
    except InvalidInputError as exc:
        outcome = str(exc)
    return outcome, _stored(store, log)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_the_spark_route_stores_what_the_route_in_this_process_stores(tmp_path, spark, layout):
    write, cfg = LAYOUTS[layout]
    log = write(tmp_path / "landing")
    here, stored_here = _ingest(tmp_path, "here", tmp_path / "landing", log, cfg, None)
    there, stored_there = _ingest(
        tmp_path, "spark", tmp_path / "landing", log, cfg, SparkOffer(lambda: spark, GiB, requested=True)
    )
    assert (here.path, there.path) == (IN_PROCESS, SPARK) and "asked for" in there.why
    assert stored_there == stored_here and len(stored_here["records"]) >= FILES * ROWS
    assert stored_here["stages"] == [] and len(stored_here["ingested"]) >= FILES - 1
    document_here, document_there = here.as_document(), there.as_document()
    for document in (document_here, document_there):
        del document["path"], document["why"]
    assert document_there == document_here


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_a_malformed_file_is_refused_alike_with_nothing_of_it_written(tmp_path, spark, layout):
    write, cfg = LAYOUTS[layout]
    log = write(tmp_path / "landing")
    bad = _middle_file(tmp_path / "landing", layout)
    _damage(bad)
    here, stored_here = _ingest(tmp_path, "here", tmp_path / "landing", log, cfg, None)
    there, stored_there = _ingest(
        tmp_path, "spark", tmp_path / "landing", log, cfg, SparkOffer(lambda: spark, GiB, requested=True)
    )
    assert isinstance(here, str) and here.startswith(str(bad)) and "\n" not in here
    assert there == here
    assert stored_there == stored_here and stored_there["stages"] == []
    ingested = "|".join(stored_here["ingested"])
    assert bad.name not in ingested and len(stored_here["ingested"]) >= 3  # those before it, each whole


def test_a_streamed_confluent_group_is_read_in_its_turn_on_the_spark_route(tmp_path, spark):
    """A Confluent Parquet group that tombstones chain is streamed a value file at a time in this process
    (connectors/stream.py), on the Spark route too: the same log."""
    root = tmp_path / "landing"
    _land(root, [(1, 60), (60, 130), (130, 200)])
    _, stored_here = _ingest(tmp_path, "here", root, "users-0", STREAMED_CFG, None)
    offer = SparkOffer(lambda: spark, GiB, requested=True)
    there, stored_there = _ingest(tmp_path, "spark", root, "users-0", STREAMED_CFG, offer)
    assert there.path == SPARK and stored_there == stored_here and len(stored_here["records"]) > 150


def test_a_record_refused_at_its_commit_is_refused_alike(tmp_path, spark):
    folder = tmp_path / "landing" / "users" / "partition=0"
    folder.mkdir(parents=True)
    write_avro(folder / "a.avro", avro_records(5))
    bad = [*avro_records(3, start=5), {"key": None, "value": b"x", "timestamp": 5, "offset": 8, "headers": []}]
    write_avro(folder / "b.avro", bad)
    here, stored_here = _ingest(tmp_path, "here", tmp_path / "landing", "users-0", {}, None)
    there, stored_there = _ingest(
        tmp_path, "spark", tmp_path / "landing", "users-0", {}, SparkOffer(lambda: spark, GiB, requested=True)
    )
    assert isinstance(here, str) and "b.avro: record 4: " in here and there == here
    assert stored_there == stored_here and stored_here["ingested"] == ("a.avro",)


def test_a_failure_in_the_middle_keeps_the_units_before_and_a_rerun_finishes_exactly_once(tmp_path, spark):
    root = tmp_path / "landing"
    log = native_jsonl(root)
    reference = _ingest(tmp_path, "reference", root, log, {}, None)[1]
    store = LogStore(str(tmp_path / "store"), gc_grace_s=0)
    source = landing_logs(root)[0][log]
    gone = root / "users" / "partition=0" / "part-0005.jsonl"
    kept = gone.read_bytes()
    gone.unlink()  # listed, then gone before its task reads it (a sink's retention, an operator)
    offer = SparkOffer(lambda: spark, GiB, requested=True)
    with pytest.raises(InvalidInputError, match="part-0005.jsonl: cannot read"):
        ingest(store.log(log), build_config({}), source, spark=offer)
    partial = _stored(store, log)
    assert partial["ingested"] == reference["ingested"][:5]  # the files before it committed, each whole
    assert partial["records"] == reference["records"][: 5 * ROWS] and partial["stages"] == []
    gone.write_bytes(kept)
    report = ingest(store.log(log), build_config({}), landing_logs(root)[0][log], spark=offer)
    assert report.files_ingested == FILES - 5
    assert _stored(store, log) == reference
    assert ingest(store.log(log), build_config({}), landing_logs(root)[0][log], spark=offer).files_ingested == 0


def test_the_route_goes_to_spark_past_the_memory_budget_or_when_asked(tmp_path, spark):
    session = lambda: spark  # noqa: E731 - the offer's session, opened only on the Spark route
    assert ingest_route(10 << 20, None).path == IN_PROCESS
    within = ingest_route(10 << 20, SparkOffer(session, 20 << 20))
    assert within.path == IN_PROCESS and "within COMPACTION_MEMORY_BUDGET (20 MiB)" in within.why
    cluster = lambda: "spark://10.0.0.5:7077"  # noqa: E731 - a cluster's master, named by the settings
    past = ingest_route(30 << 20, SparkOffer(session, 20 << 20, master=cluster))
    assert past.path == SPARK and "past COMPACTION_MEMORY_BUDGET (20 MiB)" in past.why
    # on a local master Spark's tasks share this machine's cores: the backlog is read here, a few files at a time
    local = ingest_route(30 << 20, SparkOffer(session, 20 << 20, master=lambda: "local[*]"))
    assert local.path == IN_PROCESS and "past COMPACTION_MEMORY_BUDGET" in local.why and "local[*]" in local.why
    assert ingest_route(30 << 20, SparkOffer(session, 20 << 20, master=lambda: None)).path == SPARK
    assert ingest_route(1, SparkOffer(session, 20 << 20, requested=True)).path == SPARK
    root = tmp_path / "landing"
    log = native_jsonl(root)
    backlog = sum(p.stat().st_size for p in root.rglob("*.jsonl"))
    report = ingest(
        LogStore(str(tmp_path / "store")).log(log),
        build_config({}),
        landing_logs(root)[0][log],
        spark=SparkOffer(session, backlog - 1, master=cluster),
    )
    assert report.path == SPARK and report.files_ingested == FILES and "past" in report.why


@pytest.mark.slow
def test_a_spark_ingestion_killed_mid_backlog_leaves_whole_files_and_a_rerun_finishes_once(tmp_path, spark):
    """`ingest --spark` SIGKILLed as its third file begins (its own progress line): the log holds a prefix
    of the files, each whole; the stage it left is unreferenced and the garbage collection removes it; a
    rerun on the Spark route ingests the rest once."""
    root, names, expected, ends = write_kill_landing(tmp_path / "kill")
    store = tmp_path / "store"
    run = Ingestion(root, store, "--spark")
    assert run.started.wait(300), run.lines
    run.wait_begun(3, timeout=300)
    run.kill()
    handle = LogStore(str(store), gc_grace_s=0).log(LOG)
    m = handle.manifest()
    k = len(m.ingested)
    assert k >= 2 and list(m.ingested) == names[:k]  # a prefix, in order, each once
    assert as_tuples(check_layout(handle, m)) == expected[: ends[k - 1]]  # whole files only
    wait_lease_expiry(handle, "append")
    offer = SparkOffer(lambda: spark, GiB, requested=True)
    report = ingest(handle, build_config({"segment.bytes": 8000}), landing_logs(root / "landing")[0][LOG], spark=offer)
    assert report.path == SPARK and report.files_ingested == len(names) - k
    m = handle.manifest()
    assert list(m.ingested) == names and as_tuples(check_layout(handle, m)) == expected
    handle.collect_garbage(grace_s=0)  # the killed run's stage and uncommitted files go
    only_referenced_data_left(handle)
    referenced_files_exist(handle)

"""The demo's Debezium topic (compaction_assets/demo/cdc.py) as topics.yaml configures it: Confluent's layout
with InsertField offsets, tombstones in tombstone/, changes out of LSN order; after ingestion and the real
Spark cleaning the deleted row is gone and every other row is at its latest change by LSN."""

from __future__ import annotations

from compaction_assets.cleaning import engine
from compaction_assets.demo import cdc as demo_cdc
from compaction_assets.ingest.landing import ingest, landing_logs
from compaction_assets.log import writer
from compaction_assets.store.log_store import LogStore
from compaction_assets.topics.config import load_topics
from resources.log_store import REPO_TOPICS


def test_the_demo_cdc_topic_loses_its_deleted_row_and_keeps_the_latest_changes(tmp_path, spark):
    written = demo_cdc.write_cdc_landing(tmp_path / "landing")
    assert any("/tombstone/" in str(p) for p in written) and any(p.name.endswith(".keys.json") for p in written)
    cfg = load_topics(REPO_TOPICS).config_for(demo_cdc.TOPIC)
    store = str(tmp_path / "store")
    handle = LogStore(store).log(demo_cdc.LOG)
    report = ingest(handle, cfg, landing_logs(tmp_path / "landing")[0][demo_cdc.LOG])
    assert report.records_appended == len(demo_cdc.change_events()) and report.timestamps_from_mtime == 0
    writer.roll(handle)
    assert engine.run(handle, cfg, spark=spark, force=True).cleaned
    assert demo_cdc.deleted_row_line(store, REPO_TOPICS) == (
        "users-cdc-0: row id=7, deleted in the source (Debezium op=d, then its tombstone), is gone from the latest "
        "state; 39 of 40 rows remain, each at its latest change by source.lsn"
    )

"""`compaction describe LOG`: the document it prints stays byte for byte what it was before its result was typed."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from compaction_assets import cli
from compaction_assets.store.log_store import LogStore
from compaction_assets.store.manifest import Hold, Horizon, LastCleaning, Uncleanable

GOLDEN = Path(__file__).with_name("describe_golden.json")


def _store_with_every_field(tmp_path) -> str:
    """A log of three segments whose manifest fills every field describe prints (set through the store's own
    update, so no Spark runs): a cleaning's summary, an uncleanable mark, remembered deletes, a hold."""
    store = str(tmp_path / "store")
    topics = tmp_path / "t.yaml"
    topics.write_text("defaults: {segment.bytes: 300, delete.retention.ms: 1000000}\ntopics: {d: {}}\n")
    lines = tmp_path / "in.jsonl"
    lines.write_text(
        "".join(
            json.dumps({"key": f"k{i % 7}", "value": None if i % 9 == 0 else f"v{i}", "timestamp": 1000 + i}) + "\n"
            for i in range(40)
        )
    )
    for argv in (["config", "apply", str(topics)], ["append", "d-0", str(lines)], ["roll", "d-0"]):
        assert cli.main(["--store", store, "--now", "2000"] + argv) == 0, argv
    LogStore(store).log("d-0").update(
        lambda m: m.with_(
            last_cleaning=LastCleaning(now=1500, reason="forced", figures={"records_read": 40, "records_written": 7}),
            uncleanable=Uncleanable("a segment cannot be read", 1700),
            remembered={"file": "remembered.parquet", "count": 3, "min_expiry": 9000},
            holds=(Hold(offset=9, horizon=1_001_009, until=30),),
            segments=(replace(m.segments[0], horizons=(Horizon(1_001_009, 1, 9, 9),)),) + m.segments[1:],
        )
    )
    return store


def test_describe_prints_the_same_document_as_before(tmp_path, capsys, monkeypatch):
    # the memory budget set, so that the paths' bounds are the same on every machine
    monkeypatch.setenv("COMPACTION_MEMORY_BUDGET", str(64 << 20))
    monkeypatch.delenv("COMPACTION_TABLE_MAX_STATE_BYTES", raising=False)
    store = _store_with_every_field(tmp_path)
    capsys.readouterr()
    assert cli.main(["--store", store, "describe", "d-0", "--now", "6000"]) == 0
    out = capsys.readouterr().out
    # when and from which file the configuration was applied differ from run to run: the golden text has
    # placeholders for them, filled with this run's values before the texts are compared byte for byte
    printed = json.loads(out)
    assert printed["config_changed_ms"] > 0 and printed["config_changed_by"].startswith("config apply ")
    expected = GOLDEN.read_text().replace('"@changed_ms"', str(printed["config_changed_ms"]))
    assert out == expected.replace("@changed_by", printed["config_changed_by"])

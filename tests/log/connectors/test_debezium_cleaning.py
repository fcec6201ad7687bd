"""Debezium topics whose partition order differs from the source's order, landed in Confluent's layout and
cleaned by the real Spark cleaning: each row ends at its latest change by the source's position, for
PostgreSQL (`source.lsn`), SQL Server (`source.change_lsn`, 80-bit LSN text) and MySQL (`source.file,
source.pos,source.row`)."""

from __future__ import annotations

import json

import pytest

from compaction_assets.cleaning import engine
from compaction_assets.errors import InvalidInputError
from compaction_assets.ingest.connectors.debezium import pack_version
from compaction_assets.ingest.landing import ingest, landing_logs
from compaction_assets.log import writer
from compaction_assets.log.reader import iter_records
from compaction_assets.topics.config import build_config
from compaction_assets.topics.landing_settings import parse_version_fields
from tests.log.connectors.sinks import confluent_name, write_lines


def postgres(rank: int) -> dict:
    return {"connector": "postgresql", "lsn": 24_000_000 + rank * 1000, "txId": rank}


def sqlserver(rank: int) -> dict:
    """LSNs above 2**63 as 80-bit numbers, ordered by VLF then block; the slot falls as the rank rises, so
    that reading only the trailing digits would order them backwards."""
    lsn = f"{0xA000 + rank // 10:08x}:{(rank % 10) << 20:08x}:{4095 - rank:04x}"
    return {"connector": "sqlserver", "change_lsn": lsn, "commit_lsn": lsn, "event_serial_no": 1}


def mysql(rank: int) -> dict:
    """A new binlog file restarts the position: file 2 at pos 4 is after file 1 at pos 5004."""
    return {"connector": "mysql", "file": f"mysql-bin.{rank // 10:06d}", "pos": (rank % 10) * 1000 + 4, "row": 0}


SOURCES = {"source.lsn": postgres, "source.change_lsn": sqlserver, "source.file,source.pos,source.row": mysql}


def event(op: str, row_id: int, email: str | None, source: dict, offset: int) -> dict:
    row = {"id": row_id, "email": email}
    return {
        "before": row if op == "d" else None,
        "after": None if op == "d" else row,
        "op": op,
        "ts_ms": 1_700_000_000_000 - offset,
        "source": source,
        "kafka_offset": offset,
    }


def land(root, start: int, events: list[dict]) -> None:
    part = root / "users" / "partition=0"
    write_lines(part / confluent_name("users", 0, start, ext="json"), events)
    write_lines(
        part / confluent_name("users", 0, start, ".keys", "json"),
        [{"id": (e["after"] or e["before"])["id"]} for e in events],
    )


@pytest.mark.parametrize("fields", list(SOURCES))
def test_the_spark_cleaning_keeps_each_rows_latest_change_by_source_position(tmp_path, store, spark, fields):
    pos = SOURCES[fields]
    root = tmp_path / "landing"
    land(
        root,
        0,
        [
            event("c", 1, "a1", pos(10), 0),
            event("u", 1, "a3", pos(35), 1),
            event("u", 1, "a2", pos(20), 2),  # an older change lands later
            event("c", 2, "b1", pos(15), 3),
            event("d", 2, "b1", pos(40), 4),
        ],
    )
    write_lines(root / "users" / "tombstone" / confluent_name("users", 0, 5, ".keys", "json"), [{"id": 2}])
    land(
        root,
        6,
        [
            event("u", 2, "b-stale", pos(36), 6),  # before the delete: must not revive
            event("r", 3, "c", pos(5), 7),
        ],
    )
    cfg = build_config(
        {
            "landing.format": "confluent",
            "landing.offset.field": "kafka_offset",
            "cdc.format": "debezium",
            "cdc.version.fields": fields,
            "compaction.strategy": "header",
            "compaction.strategy.header": "dbz.version",
            "segment.bytes": 400,
        }
    )
    handle = store.log("users-0")
    assert ingest(handle, cfg, landing_logs(root)[0]["users-0"]).records_appended == 8
    writer.roll(handle)
    report = engine.run(handle, cfg, spark=spark, force=True)
    assert report.cleaned
    kept = [(json.loads(r.key)["id"], r.value and json.loads(r.value)["email"]) for r in iter_records(handle)]
    live = {k: v for k, v in kept if v is not None}
    assert live == {1: "a3", 3: "c"}
    assert [v for k, v in kept if k == 2] in ([], [None]), kept  # the delete wins over the later stale update
    assert len(kept) < 8


def test_sqlserver_lsns_pack_in_order_and_one_too_large_is_refused():
    fields = parse_version_fields("source.change_lsn")

    def v(lsn: str) -> int:
        return int.from_bytes(pack_version({"source": {"change_lsn": lsn}}, fields, "r"), "big", signed=True)

    ordered = [
        "00000027:00000758:0003",
        "00000027:00000758:0004",
        "00000027:00000759:0001",
        "00000028:00000001:0001",
        "00ffffff:07ffffff:0fff",
    ]
    assert [v(x) for x in ordered] == sorted(v(x) for x in ordered)
    assert len({v(x) for x in ordered}) == len(ordered)
    with pytest.raises(
        InvalidInputError,
        match=r"r: version field source.change_lsn='01000000:00000001:0001': "
        r"its VLF sequence 16777216 does not fit in 24 bits",
    ):
        v("01000000:00000001:0001")
    with pytest.raises(InvalidInputError, match=r"its slot 4096 does not fit in 12 bits"):
        v("00000027:00000758:1000")

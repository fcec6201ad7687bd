"""Avro landing files (Kafka Connect's layout): one lands whole with bytes keys and values, tombstones and
headers; a corrupt one or an invalid record is refused naming the file and the record, nothing written."""

import io

import fastavro
import pytest

from compaction_assets.errors import InvalidInputError
from compaction_assets.ingest.landing import ingest, landing_logs, pending_files
from compaction_assets.log.reader import iter_records
from compaction_assets.topics.config import build_config

SCHEMA = fastavro.parse_schema(
    {
        "type": "record",
        "name": "ConnectRecord",
        "fields": [
            {"name": "key", "type": ["null", "bytes", "string"]},
            {"name": "value", "type": ["null", "bytes", "string"]},
            {"name": "timestamp", "type": "long"},
            {"name": "offset", "type": ["null", "long"], "default": None},
            {
                "name": "headers",
                "type": {
                    "type": "array",
                    "items": {
                        "type": "record",
                        "name": "Header",
                        "fields": [{"name": "key", "type": "string"}, {"name": "value", "type": ["null", "bytes"]}],
                    },
                },
                "default": [],
            },
        ],
    }
)


def write_avro(path, records, codec="null"):
    buf = io.BytesIO()
    fastavro.writer(buf, SCHEMA, records, codec=codec, sync_interval=64)  # several blocks
    path.write_bytes(buf.getvalue())


def records(n, start=0):
    return [
        {
            "key": f"k{i % 4}".encode(),
            "value": None if i % 5 == 4 else bytes([0xFF, i % 256]),
            "timestamp": 1000 + i,
            "offset": start + i,
            "headers": [{"key": "src", "value": b"\x00\x01"}],
        }
        for i in range(n)
    ]


@pytest.fixture
def folder(tmp_path):
    path = tmp_path / "landing" / "orders" / "partition=0"
    path.mkdir(parents=True)
    return path


def test_an_avro_file_from_kafka_connect_lands_whole(store, folder):
    write_avro(folder / "orders+0+0000000000.avro", records(20))
    found, refused = landing_logs(folder.parent.parent)
    assert list(found) == ["orders-0"] and refused == []
    assert [p.name for p in pending_files(folder, ())] == ["orders+0+0000000000.avro"]
    handle = store.log("orders-0")
    report = ingest(handle, build_config({}), folder)
    assert report.records_appended == 20
    got = list(iter_records(handle))
    assert [r.offset for r in got] == list(range(20))
    assert got[1].key == b"k1" and got[1].value == bytes([0xFF, 1])  # bytes, not UTF-8
    assert got[4].value is None  # a tombstone
    assert list(got[0].headers) == [("src", b"\x00\x01")]


def test_a_corrupt_avro_file_is_refused_with_its_record_number(store, folder):
    write_avro(folder / "orders+0+0000000000.avro", records(5))
    bad = folder / "orders+0+0000000005.avro"
    write_avro(bad, records(200, start=5), codec="deflate")
    data = bytearray(bad.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 40] = b"\x13" * 40  # damage a block in the middle
    bad.write_bytes(bytes(data))
    handle = store.log("orders-0")
    with pytest.raises(InvalidInputError) as info:
        ingest(handle, build_config({}), folder)
    message = str(info.value)
    assert message.startswith(f"{bad}: record ") and "corrupt Avro data" in message and "\n" not in message
    m = handle.manifest()
    assert m.log_end_offset == 5 and m.ingested == ("orders+0+0000000000.avro",)  # nothing of the bad file


def test_not_avro_and_invalid_records_are_refused(store, folder):
    (folder / "a.avro").write_bytes(b"PAR1 this is not avro")
    with pytest.raises(InvalidInputError, match=r"a\.avro: not a readable Avro file"):
        ingest(store.log("orders-0"), build_config({}), folder)
    (folder / "a.avro").unlink()
    write_avro(
        folder / "b.avro", [*records(3), {"key": None, "value": b"x", "timestamp": 5, "offset": 3, "headers": []}]
    )
    with pytest.raises(InvalidInputError, match=r"b\.avro: record 4: .*key"):
        ingest(store.log("orders-0"), build_config({}), folder)
    assert store.log("orders-0").manifest().log_end_offset == 0

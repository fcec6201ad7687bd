"""Ingestion refusals (SPEC §1): a refused batch names its source and offset and writes nothing; bytes
round-trip exactly; log names that could reach outside the store are refused."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from compaction_assets.errors import InvalidInputError, LogNameError, OffsetError
from compaction_assets.log import writer
from compaction_assets.log.reader import iter_records
from compaction_assets.log.spark_reads import read_df
from compaction_assets.segments.records import INPUT_SCHEMA
from compaction_assets.store.names import check_partition, log_name, parse_log_name
from compaction_assets.topics.config import build_config

CFG = build_config({})


def snapshot(log):
    """Everything an append could change: the manifest and the files of the log's folder."""
    m = log.manifest()
    files = []
    for top in ("data", "_log", "side"):
        base = log.path(top)
        for dirpath, _, names in os.walk(base):
            files += [os.path.relpath(os.path.join(dirpath, n), log.path("")) for n in names]
    return m.version, m.to_json(), sorted(files)


@pytest.fixture
def log(store):
    h = store.log("orders-0")
    writer.append(h, CFG, [{"key": "a", "value": "1", "timestamp": 10}, {"key": "b", "value": "2", "timestamp": 11}])
    return h


def refuse(log, data, *, match=(), **kw):
    before = snapshot(log)
    with pytest.raises(InvalidInputError) as info:
        writer.append(log, CFG, data, **kw)
    msg = str(info.value)
    for part in match:
        assert part in msg, f"{part!r} not in {msg!r}"
    assert snapshot(log) == before, "a refused batch must write nothing"
    assert log.lock_holder("append") is None, "the append lock must be released"
    return msg


# --- null keys ---------------------------------------------------------------------------------------


def test_null_key_refused_naming_source_and_offset(log):
    msg = refuse(
        log,
        [
            {"key": "c", "value": "3", "timestamp": 12},
            {"key": None, "value": "4", "timestamp": 13},
            {"key": "d", "value": "5", "timestamp": 14},
        ],
        source="landing/orders/file-0001.json",
        match=("landing/orders/file-0001.json", "3"),
    )
    assert "has a null key" in msg and "nothing of this batch was written" in msg
    # offset 3 is the null-key record's (LEO was 2): the message names it
    assert "offset 3" in msg


def test_null_key_refused_with_explicit_offsets(log):
    msg = refuse(
        log,
        [
            {"key": "c", "value": "3", "timestamp": 12, "offset": 100},
            {"key": None, "value": "4", "timestamp": 13, "offset": 205},
        ],
        source="kafka-export",
    )
    assert "kafka-export" in msg and "205" in msg


def test_null_key_in_arrow_table_refused(log):
    table = pa.table({"key": pa.array([b"x", None], pa.binary()), "value": [b"1", b"2"], "timestamp": [1, 2]})
    refuse(log, table, source="arrow-batch", match=("arrow-batch", "offset 3"))


def test_null_key_refused_on_empty_log(store):
    h = store.log("fresh-0")
    with pytest.raises(InvalidInputError) as info:
        writer.append(h, CFG, [{"key": None, "value": "x", "timestamp": 1}], source="s3://bucket/f")
    assert "s3://bucket/f" in str(info.value) and "offset 0" in str(info.value)
    assert not h.exists()
    assert not os.path.exists(h.path("data")) or not os.listdir(h.path("data"))


def test_drop_invalid_drops_and_counts(log):
    r = writer.append(
        log,
        CFG,
        [
            {"key": "c", "value": "3", "timestamp": 12},
            {"key": None, "value": "4", "timestamp": 13},
            {"key": "d", "value": None, "timestamp": 14},
            {"key": None, "value": None, "timestamp": 15},
        ],
        drop_invalid=True,
    )
    assert r.records == 2 and r.invalid_records == 2
    m = log.manifest()
    assert m.invalid_records == 2
    assert m.log_end_offset == 4
    recs = [(x.offset, x.key, x.value) for x in iter_records(log)]
    assert recs == [(0, b"a", b"1"), (1, b"b", b"2"), (2, b"c", b"3"), (3, b"d", None)]
    # counts accumulate, even when the whole batch is dropped
    r = writer.append(log, CFG, [{"key": None, "value": "x", "timestamp": 1}], drop_invalid=True)
    assert r.records == 0 and r.invalid_records == 1
    m = log.manifest()
    assert m.invalid_records == 3 and m.log_end_offset == 4
    assert len(list(iter_records(log))) == 4


def test_drop_invalid_keeps_explicit_offsets(log):
    writer.append(
        log,
        CFG,
        [
            {"key": "c", "value": "3", "timestamp": 12, "offset": 10},
            {"key": None, "value": "4", "timestamp": 13, "offset": 11},
            {"key": "d", "value": "5", "timestamp": 14, "offset": 12},
        ],
        drop_invalid=True,
    )
    assert [r.offset for r in iter_records(log)] == [0, 1, 10, 12]
    assert log.manifest().invalid_records == 1 and log.manifest().log_end_offset == 13


# --- offsets -------------------------------------------------------------------------------------------


def test_offsets_going_backwards_refused(log):
    msg = refuse(
        log,
        [
            {"key": "c", "value": "3", "timestamp": 12, "offset": 10},
            {"key": "d", "value": "4", "timestamp": 13, "offset": 9},
        ],
        source="src-a",
        match=("src-a", "9", "10"),
    )
    assert "increasing" in msg


def test_repeated_offset_refused(log):
    refuse(
        log,
        [
            {"key": "c", "value": "3", "timestamp": 12, "offset": 10},
            {"key": "d", "value": "4", "timestamp": 13, "offset": 11},
            {"key": "e", "value": "5", "timestamp": 13, "offset": 11},
        ],
        source="src-b",
        match=("src-b", "11"),
    )


def test_offset_below_leo_refused(log):
    msg = refuse(
        log, [{"key": "c", "value": "3", "timestamp": 12, "offset": 1}], source="src-c", match=("src-c", "1", "2")
    )
    assert "log end offset" in msg or "LEO" in msg
    # equal to LEO is fine
    writer.append(log, CFG, [{"key": "c", "value": "3", "timestamp": 12, "offset": 2}])
    assert log.manifest().log_end_offset == 3


def test_explicit_offset_below_implicit_successor_refused(log):
    # the first record takes LEO (2), so an explicit 2 for the second one repeats it
    refuse(
        log,
        [{"key": "c", "value": "3", "timestamp": 12}, {"key": "d", "value": "4", "timestamp": 13, "offset": 2}],
        source="mixed",
        match=("mixed", "2"),
    )


def test_offset_gaps_are_kept(log):
    writer.append(
        log,
        CFG,
        [
            {"key": "c", "value": "3", "timestamp": 12, "offset": 5},
            {"key": "d", "value": "4", "timestamp": 13, "offset": 9},
        ],
    )
    assert [r.offset for r in iter_records(log)] == [0, 1, 5, 9]
    assert log.manifest().log_end_offset == 10
    refuse(log, [{"key": "e", "value": "5", "timestamp": 14, "offset": 7}], match=("7",))


def test_first_explicit_offset_sets_log_start_and_checkpoint(store):
    h = store.log("export-3")
    writer.append(h, CFG, [{"key": "a", "value": "1", "timestamp": 1, "offset": 4242}])
    m = h.manifest()
    assert (m.log_start_offset, m.checkpoint, m.log_end_offset) == (4242, 4242, 4243)


# --- timestamps ---------------------------------------------------------------------------------------


def test_missing_timestamp_refused(log):
    msg = refuse(
        log,
        [{"key": "c", "value": "3", "timestamp": 12}, {"key": "d", "value": "4"}],
        source="no-ts",
        match=("no-ts", "offset 3"),
    )
    assert "timestamp" in msg


def test_missing_timestamp_column_refused(log):
    refuse(log, pa.table({"key": [b"c"], "value": [b"3"]}), source="no-ts-col", match=("no-ts-col", "timestamp"))


def test_missing_timestamp_filled_with_now(log):
    writer.append(log, CFG, [{"key": "c", "value": "3"}, {"key": "d", "value": "4", "timestamp": 7}], now=123_456)
    recs = list(iter_records(log))
    assert [(r.offset, r.timestamp) for r in recs[2:]] == [(2, 123_456), (3, 7)]


def test_negative_timestamp_refused(log):
    msg = refuse(
        log,
        [{"key": "c", "value": "3", "timestamp": 12}, {"key": "d", "value": "4", "timestamp": -1}],
        source="neg",
        match=("neg", "offset 3", "-1"),
    )
    assert "negative" in msg or "timestamp" in msg


def test_timestamp_zero_accepted(log):
    writer.append(log, CFG, [{"key": "z", "value": "0", "timestamp": 0}])
    assert list(iter_records(log))[-1].timestamp == 0


def test_non_integer_timestamp_in_dicts_refused(log):
    for bad in (1.5, "12", True):
        refuse(log, [{"key": "c", "value": "3", "timestamp": bad}], source="typed", match=("typed", "timestamp"))


# --- Arrow tables: column types and missing columns ---------------------------------------------------------


@pytest.mark.parametrize(
    "column,array",
    [
        ("key", pa.array([1], pa.int64())),
        ("key", pa.array([True])),
        ("value", pa.array([5], pa.int64())),
        ("value", pa.array([1.5])),
        ("timestamp", pa.array(["abc"])),
        ("timestamp", pa.array(["1000"])),  # a string column is the wrong type, even if it parses
        ("timestamp", pa.array([True])),  # a boolean is not a timestamp
        ("timestamp", pa.array([1.5])),
        ("offset", pa.array([1.5])),
        ("offset", pa.array(["5"])),
        ("offset", pa.array([True])),
        ("headers", pa.array(["x"])),
        ("headers", pa.array([[1, 2]])),
    ],
    ids=lambda x: str(x.type) if isinstance(x, pa.Array) else x,
)
def test_wrong_column_type_refused(log, column, array):
    cols = {"key": pa.array([b"k"]), "value": pa.array([b"v"]), "timestamp": pa.array([5], pa.int64())}
    cols[column] = array
    # refused for its type (not, say, because a coerced offset happens to be below LEO)
    refuse(log, pa.table(cols), source="typed.parquet", match=("typed.parquet", column, str(array.type)))


@pytest.mark.parametrize("missing", ["key", "value"])
def test_missing_column_refused(log, missing):
    cols = {"key": pa.array([b"k"]), "value": pa.array([b"v"]), "timestamp": pa.array([5], pa.int64())}
    del cols[missing]
    refuse(log, pa.table(cols), source="partial.parquet", match=("partial.parquet", missing))


def test_unknown_column_refused(log):
    refuse(
        log,
        pa.table({"key": [b"k"], "value": [b"v"], "timestamp": [5], "partition": [0]}),
        source="extra",
        match=("extra", "partition"),
    )


def test_string_key_value_columns_accepted_as_utf8(log):
    writer.append(
        log,
        CFG,
        pa.table(
            {
                "key": ["ключ"],
                "value": pa.array(["значение"], pa.large_string()),
                "timestamp": pa.array([5], pa.int32()),
            }
        ),
    )
    r = list(iter_records(log))[-1]
    assert r.key == "ключ".encode() and r.value == "значение".encode() and r.timestamp == 5


def test_bad_headers_in_dicts_refused(log):
    refuse(log, [{"key": "c", "value": "3", "timestamp": 1, "headers": [(5, b"x")]}], source="h", match=("h",))
    refuse(log, [{"key": "c", "value": "3", "timestamp": 1, "headers": "nope"}], source="h2", match=("h2",))
    refuse(
        log, [{"key": "c", "value": "3", "timestamp": 1, "headers": [("a", b"x", "extra")]}], source="h3", match=("h3",)
    )


def test_whole_batch_refused_not_a_prefix(store):
    # a refusal late in a large batch that would roll many segments writes nothing
    cfg = build_config({"segment.bytes": 100})
    h = store.log("big-0")
    writer.append(h, cfg, [{"key": "a", "value": "x", "timestamp": 1}])
    before = snapshot(h)
    batch = [{"key": f"k{i}", "value": "y" * 40, "timestamp": 2} for i in range(500)]
    batch[-1]["timestamp"] = -5
    with pytest.raises(InvalidInputError, match="offset 500"):
        writer.append(h, cfg, batch, source="late-error")
    assert snapshot(h) == before


# --- bytes round-trip -------------------------------------------------------------------------------------

WEIRD = [
    (b"\xff\xfe\x00\x01", b"\x80\x81\x82\x00\xff"),
    (b"\x00", b""),  # empty value is not a tombstone
    (b"\xc3\x28", None),  # invalid UTF-8 key, tombstone
    (bytes(range(256)), bytes(range(255, -1, -1)) * 3),
    ("é".encode("latin-1"), b"\xed\xa0\x80"),  # a lone surrogate in UTF-8 form
]


def test_non_utf8_bytes_round_trip(store, spark):
    h = store.log("bin-0")
    batch = [
        {"key": k, "value": v, "timestamp": i, "headers": [("h\u00e9", b"\xff\x00"), ("n", None)]}
        for i, (k, v) in enumerate(WEIRD)
    ]
    writer.append(h, CFG, batch)
    got = [(r.key, r.value, r.headers) for r in iter_records(h)]
    assert got == [(k, v, [("h\u00e9", b"\xff\x00"), ("n", None)]) for k, v in WEIRD]
    rows = read_df(spark, h).collect()
    assert [r["offset"] for r in rows] == list(range(len(WEIRD)))
    spark_got = [
        (
            bytes(r["key"]),
            None if r["value"] is None else bytes(r["value"]),
            [(x["name"], None if x["value"] is None else bytes(x["value"])) for x in r["headers"]],
        )
        for r in rows
    ]
    assert spark_got == got
    # the empty value stays an empty value (not a tombstone); the None stays a tombstone
    assert rows[1]["value"] is not None and bytes(rows[1]["value"]) == b""
    assert rows[2]["value"] is None


def test_arrow_binary_round_trip(store):
    h = store.log("bin-1")
    keys = [k for k, _ in WEIRD]
    values = [v for _, v in WEIRD]
    writer.append(
        h,
        CFG,
        pa.table(
            {
                "key": pa.array(keys, pa.large_binary()),
                "value": pa.array(values, pa.binary()),
                "timestamp": pa.array(range(len(keys)), pa.int64()),
            }
        ),
    )
    assert [(r.key, r.value) for r in iter_records(h)] == WEIRD


def test_five_megabyte_value_round_trips(store, spark):
    h = store.log("large-0")
    big = os.urandom(5 * 1024 * 1024)
    writer.append(
        h, CFG, [{"key": b"big", "value": big, "timestamp": 1}, {"key": b"small", "value": b"s", "timestamp": 2}]
    )
    recs = list(iter_records(h))
    assert recs[0].value == big and recs[1].value == b"s"
    assert h.manifest().active.size == 16 + 3 + len(big) + 16 + 5 + 1
    row = read_df(spark, h).where("offset = 0").collect()[0]
    assert bytes(row["value"]) == big


# --- log names ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "../x-0",
        "x",
        "a/b-0",
        "t" * 250 + "-0",
        "-1",
        "x-",
        "-0",
        "..-0",
        ".-0",
        "x-01",
        "x-+1",
        "x-1.5",
        "x-0/../../y-0",
        "x y-0",
        "ü-0",
        "x-2147483648",
        "x-0\n",
        "/abs-0",
        "x\\y-0",
        "",
    ],
)
def test_invalid_log_names_refused(store, name):
    with pytest.raises(LogNameError):
        store.log(name)
    # nothing is created anywhere for a refused name
    assert not os.path.exists(store.location) or os.listdir(store.location) == []


@pytest.mark.parametrize("name", ["x-0\n", "x\n-0", "x-0\r", "x-\n0", "x-0 "])
def test_log_names_with_line_breaks_or_spaces_refused(store, name):
    # names become paths: a trailing newline must not slip through (e.g. a regex `$` that
    # matches before a final newline)
    with pytest.raises(LogNameError):
        store.log(name)
    with pytest.raises(LogNameError):
        parse_log_name(name)


def test_log_name_refusal_message_names_the_name(store):
    with pytest.raises(LogNameError) as info:
        store.log("../etc-0")
    assert "../etc" in str(info.value)


def test_valid_log_names(store):
    for name in ["t" * 249 + "-0", "a-0", "a.b_c-D-7", "x--1", "x-2147483647", "2024-3"]:
        store.log(name)
    assert parse_log_name("x--1") == ("x-", 1)  # topic "x-", partition 1: unambiguous
    assert parse_log_name("my-topic-12") == ("my-topic", 12)


def test_negative_or_bad_partitions_refused():
    for bad in (-1, "-1", True, 1.0, "1a", "", 2**31):
        with pytest.raises(LogNameError):
            check_partition(bad)
    with pytest.raises(LogNameError):
        log_name("x", -1)
    with pytest.raises(LogNameError):
        log_name("../x", 0)
    assert log_name("x", 0) == "x-0"


def test_invalid_names_refused_by_store_listing(store):
    # a folder with an invalid name inside the store is not listed as a log
    h = store.log("good-0")
    writer.append(h, CFG, [{"key": "a", "value": "1", "timestamp": 1}])
    import shutil

    for bad in ("bad name-0", "x-01", "..-0"):
        shutil.copytree(h.path("_log"), os.path.join(store.location, bad, "_log"))
    assert store.logs() == ["good-0"]


# --- log start moves -----------------------------------------------------------------------------------


def test_set_log_start_beyond_leo_refused(log):
    before = snapshot(log)
    with pytest.raises(OffsetError) as info:
        writer.set_log_start(log, 3)
    msg = str(info.value)
    assert "orders-0" in msg and "3" in msg and "2" in msg
    assert snapshot(log) == before


def test_set_log_start_down_is_noop_and_to_leo_allowed(log):
    writer.set_log_start(log, 1)
    v = log.manifest().version
    writer.set_log_start(log, 0)
    assert log.manifest().version == v and log.manifest().log_start_offset == 1
    assert [r.offset for r in iter_records(log)] == [1]
    writer.set_log_start(log, 2)
    m = log.manifest()
    assert m.log_start_offset == 2 and list(iter_records(log)) == []


def test_set_checkpoint_refuses_non_integers(log):
    for bad in ("5", 1.0, True, None):
        with pytest.raises(OffsetError):
            writer.set_checkpoint(log, bad)


def test_input_schema_is_the_documented_one():
    assert INPUT_SCHEMA.names == ["offset", "key", "value", "timestamp", "headers"]

"""The bad-input corpus (tests/corpus/, plus Parquet files generated here): every bad file is refused
with one line naming the file and the line (JSON Lines), row (Parquet) or column, and nothing of it is
written; good files with awkward content (bytes that are not UTF-8, 5 MB values, header values of the
wrong size for the header strategy, a topic missing from the topics file) round-trip exactly or behave
as SPEC §1, §2 and §6 say. Every invalid configuration of SPEC §2 is refused from a topics file before
anything runs.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from compaction_assets import cli
from compaction_assets.cleaning import engine
from compaction_assets.errors import InvalidInputError
from compaction_assets.ingest.landing import ingest
from compaction_assets.log import writer
from compaction_assets.log.reader import iter_records
from compaction_assets.state.latest_state import latest_state_df
from compaction_assets.store.log_store import LogStore
from compaction_assets.topics.config import build_config, load_topics
from tests.log.test_bad_input import snapshot

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
CFG = build_config({})

# what each bad JSON Lines file of the corpus is refused for (the place is line 3 unless said)
JSONL_REASONS = {
    "bad-malformed-json": "malformed JSON",
    "bad-trailing-garbage": "malformed JSON",
    "bad-not-an-object": "expected a JSON object",
    "bad-key-number": "key must be a string or null",
    "bad-value-object": "value must be a string or null",
    "bad-timestamp-string": "timestamp must be an integer",
    "bad-timestamp-float": "timestamp must be an integer",
    "bad-timestamp-bool": "timestamp must be an integer",
    "bad-timestamp-overflow": "does not fit in a signed 64-bit integer",
    "bad-offset-string": "offset must be an integer",
    "bad-headers-not-a-list": "headers must be a list",
    "bad-header-name-number": "header name 1 is not a string",
    "bad-header-value-bool": "header 'h' value",
    "bad-header-int-overflow": "does not fit in 8 bytes",
    "bad-missing-key": "missing required field 'key'",
    "bad-missing-value": "missing required field 'value'",
    "bad-unknown-field": "unknown field(s) ['partition']",
    "bad-key-and-key-b64": "both 'key' and 'key_b64'",
    "bad-invalid-base64": "invalid base64",
    "bad-not-utf8": "not UTF-8",
    # refused by the record rules of SPEC §1 (the log holds 2 records: the file's third is offset 4)
    "bad-null-key": "record at offset 4 has a null key",
    "bad-timestamp-missing": "record at offset 4 has no timestamp",
    "bad-timestamp-negative": "record at offset 4 has a negative timestamp -1",
    "bad-offsets-backwards": "offset 11 follows offset 12",
    "bad-offsets-repeat": "offset 12 follows offset 12",
    "bad-offset-below-log-end": "offset 1 is below the log end offset 2",
}
JSONL_LINE = {"bad-offset-below-log-end": 1}

HEADERS = pa.list_(pa.struct([("name", pa.string()), ("value", pa.binary())]))


def _table(**cols) -> pa.Table:
    base = {
        "key": pa.array([b"a", b"b", b"c"]),
        "value": pa.array([b"1", b"2", b"3"]),
        "timestamp": pa.array([1, 2, 3], pa.int64()),
    }
    base.update(cols)
    return pa.table({k: v for k, v in base.items() if v is not None})


# name -> (table or raw bytes, what the message must say)
PARQUET_BAD = {
    "bad-key-int64": (_table(key=pa.array([1, 2, 3])), "column 'key' has type int64"),
    "bad-value-double": (_table(value=pa.array([1.0, 2.0, 3.0])), "column 'value' has type double"),
    "bad-timestamp-string": (_table(timestamp=pa.array(["1", "2", "3"])), "column 'timestamp' has type string"),
    "bad-timestamp-double": (_table(timestamp=pa.array([1.0, 2.0, 3.0])), "column 'timestamp' has type double"),
    "bad-timestamp-bool": (_table(timestamp=pa.array([True, True, False])), "column 'timestamp' has type bool"),
    "bad-offset-string": (_table(offset=pa.array(["4", "5", "6"])), "column 'offset' has type string"),
    "bad-offset-uint64-overflow": (_table(offset=pa.array([4, 5, 2**64 - 1], pa.uint64())), "column 'offset'"),
    "bad-headers-string": (_table(headers=pa.array(["h", "h", "h"])), "column 'headers' has type string"),
    "bad-header-value-int": (_table(headers=pa.array([[{"name": "v", "value": 1}]] * 3)), "column 'headers'"),
    "bad-missing-key": (_table(key=None), "missing required column(s) ['key']"),
    "bad-missing-value": (_table(value=None), "missing required column(s) ['value']"),
    "bad-unknown-column": (_table(partition=pa.array([0, 0, 0])), "unknown column(s) ['partition']"),
    "bad-null-key": (_table(key=pa.array([b"a", b"b", None])), "row 3: record at offset 4 has a null key"),
    "bad-null-timestamp": (
        _table(timestamp=pa.array([1, None, 3], pa.int64())),
        "row 2: record at offset 3 has no timestamp",
    ),
    "bad-negative-timestamp": (
        _table(timestamp=pa.array([1, 2, -9], pa.int64())),
        "row 3: record at offset 4 has a negative timestamp -9",
    ),
    "bad-offsets-backwards": (_table(offset=pa.array([10, 12, 11], pa.int64())), "row 3: offset 11 follows offset 12"),
    "bad-offsets-repeat": (_table(offset=pa.array([10, 10, 11], pa.int64())), "row 2: offset 10 follows offset 10"),
    "bad-offset-below-log-end": (
        _table(offset=pa.array([0, 5, 6], pa.int64())),
        "row 1: offset 0 is below the log end offset 2",
    ),
    "bad-not-parquet": (b"PAR1 this is not a Parquet file at all \x00\xff", "not a readable Parquet file"),
    "bad-truncated": (None, "not a readable Parquet file"),
}


def write_parquet_case(name: str, folder: Path) -> Path:
    data, _ = PARQUET_BAD[name]
    path = folder / f"b-{name}.parquet"
    if name == "bad-truncated":
        pq.write_table(_table(), path)
        path.write_bytes(path.read_bytes()[:-20])
    elif isinstance(data, bytes):
        path.write_bytes(data)
    else:
        pq.write_table(data, path)
    return path


@pytest.fixture
def seeded(tmp_path):
    """A landing folder whose first file (2 records) is already ingested; a topics file."""
    folder = tmp_path / "landing" / "t" / "partition=0"
    folder.mkdir(parents=True)
    shutil.copy(CORPUS / "good-seed.jsonl", folder / "a-seed.jsonl")
    topics = tmp_path / "topics.yaml"
    topics.write_text("{}\n")
    h = LogStore(str(tmp_path / "store")).log("t-0")
    assert ingest(h, CFG, folder).records_appended == 2
    return tmp_path, folder, h, topics


def cli_run(capsys, *args) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = cli.main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def errors_of(err: str) -> list[str]:
    """stderr without the progress lines ("[12:34:56] ...")."""
    return [line for line in err.splitlines() if not line.startswith("[")]


def refused_everywhere(seeded, capsys, path: Path, reason: str, place: str | None) -> None:
    """landing.ingest and the CLI refuse the file with one line naming it; nothing of it is written."""
    tmp, folder, h, topics = seeded
    before = snapshot(h)
    with pytest.raises(InvalidInputError) as info:
        ingest(h, CFG, folder)
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith(f"{path}: "), msg
    assert reason in msg, msg
    if place:
        assert msg.startswith(f"{path}: {place}: "), msg
    assert snapshot(h) == before and h.manifest().ingested == ("a-seed.jsonl",)
    assert h.lock_holder("append") is None
    rc, out, err = cli_run(
        capsys, "--store", h.store.location, "--topics", str(topics), "ingest", "--landing", str(tmp / "landing")
    )
    # the failed log is reported under its name, nothing of it ingested (the other logs would go on)
    assert rc == 1 and json.loads(out)["t-0"]["error"] == msg and json.loads(out)["t-0"]["files"] == []
    assert errors_of(err) == [f"error: t-0: {msg}"]
    assert snapshot(h) == before
    # and `append` of the same file
    rc, _, err = cli_run(capsys, "--store", h.store.location, "--topics", str(topics), "append", "t-0", str(path))
    assert rc == 1 and errors_of(err) == [f"error: {msg}"] and snapshot(h) == before


def test_corpus_and_table_agree():
    files = sorted(p.stem for p in CORPUS.glob("bad-*.jsonl"))
    assert files == sorted(JSONL_REASONS)


@pytest.mark.parametrize("name", sorted(JSONL_REASONS))
def test_bad_jsonl_file_refused(seeded, capsys, name):
    path = seeded[1] / f"b-{name}.jsonl"
    shutil.copy(CORPUS / f"{name}.jsonl", path)
    refused_everywhere(seeded, capsys, path, JSONL_REASONS[name], f"line {JSONL_LINE.get(name, 3)}")


@pytest.mark.parametrize("name", sorted(PARQUET_BAD))
def test_bad_parquet_file_refused(seeded, capsys, name):
    path = write_parquet_case(name, seeded[1])
    reason = PARQUET_BAD[name][1]
    place = reason.split(":")[0] if reason.startswith("row ") else None
    refused_everywhere(seeded, capsys, path, reason, place)


def test_a_bad_file_stops_the_ingestion_of_later_files(seeded, capsys):
    """Files land in order: a bad one stops the ingestion; the files after it wait for it to be fixed."""
    _tmp, folder, h, _topics = seeded
    shutil.copy(CORPUS / "bad-null-key.jsonl", folder / "b-bad.jsonl")
    shutil.copy(CORPUS / "good-binary.jsonl", folder / "c-good.jsonl")
    before = snapshot(h)
    with pytest.raises(InvalidInputError, match="b-bad.jsonl: line 3"):
        ingest(h, CFG, folder)
    assert snapshot(h) == before
    (folder / "b-bad.jsonl").write_text((CORPUS / "good-seed.jsonl").read_text())  # repaired
    assert ingest(h, CFG, folder).files == ("b-bad.jsonl", "c-good.jsonl")


# --- good files: exact round trips ------------------------------------------------------------------------


def expected_binary() -> list[tuple]:
    """good-binary.jsonl decoded by hand: (key, value, timestamp, headers)."""
    out = []
    for line in (CORPUS / "good-binary.jsonl").read_text().splitlines():
        if not line.strip():
            continue
        o = json.loads(line)
        key = base64.b64decode(o["key_b64"]) if "key_b64" in o else o["key"].encode()
        if "value_b64" in o:
            value = None if o["value_b64"] is None else base64.b64decode(o["value_b64"])
        else:
            value = None if o["value"] is None else o["value"].encode()
        headers = []
        for n, v in o.get("headers", []):
            if isinstance(v, dict):
                v = base64.b64decode(v["b64"])
            elif isinstance(v, int):
                v = v.to_bytes(8, "big", signed=True)
            elif isinstance(v, str):
                v = v.encode()
            headers.append((n, v))
        out.append((key, value, o["timestamp"], headers))
    return out


def test_non_utf8_bytes_round_trip_through_jsonl_parquet_and_cli(tmp_path, capsys):
    # (through Spark too: tests/log/test_bad_input.py::test_non_utf8_bytes_round_trip)
    want = expected_binary()
    assert any(b"\xff" in k for k, *_ in want) and want[1][1] == b"" and want[2][1] is None
    store = LogStore(str(tmp_path / "store"))
    # JSON Lines through the landing area
    folder = tmp_path / "landing" / "bin" / "partition=0"
    folder.mkdir(parents=True)
    shutil.copy(CORPUS / "good-binary.jsonl", folder)
    h = store.log("bin-0")
    ingest(h, CFG, folder)
    got = [(r.key, r.value, r.timestamp, list(r.headers)) for r in iter_records(h)]
    assert got == want
    # Parquet with binary (and large_binary) columns carrying the same bytes
    table = pa.table(
        {
            "key": pa.array([k for k, *_ in want], pa.large_binary()),
            "value": pa.array([v for _, v, *_ in want], pa.binary()),
            "timestamp": pa.array([t for *_, t, _ in want], pa.int64()),
            "headers": pa.array([[{"name": n, "value": v} for n, v in hs] for *_, hs in want], HEADERS),
        }
    )
    pfolder = tmp_path / "landing" / "bin" / "partition=1"
    pfolder.mkdir()
    pq.write_table(table, pfolder / "x.parquet")
    h1 = store.log("bin-1")
    ingest(h1, CFG, pfolder)
    assert [(r.key, r.value, r.timestamp, list(r.headers)) for r in iter_records(h1)] == want
    # and through the CLI's `read` (keys and values that are not UTF-8 come out as key_b64 / value_b64,
    # header values as {"b64": ...}: the format `append` reads)
    rc, out, _ = cli_run(capsys, "--store", store.location, "read", "bin-0")
    assert rc == 0

    def dec(x):
        return None if x is None else base64.b64decode(x["b64"]) if isinstance(x, dict) else x.encode()

    def field(o, name):
        return base64.b64decode(o[f"{name}_b64"]) if f"{name}_b64" in o else dec(o[name])

    cli_got = [
        (field(o, "key"), field(o, "value"), o["timestamp"], [(n, dec(v)) for n, v in o["headers"]])
        for o in map(json.loads, out.splitlines())
    ]
    assert cli_got == want


def test_five_megabyte_values_round_trip(tmp_path):
    big = os.urandom(5 * 1024 * 1024)
    text = "é" * (5 * 1024 * 1024 // 2)
    folder = tmp_path / "landing" / "big" / "partition=0"
    folder.mkdir(parents=True)
    (folder / "a.jsonl").write_text(
        json.dumps({"key": "b64", "value_b64": base64.b64encode(big).decode(), "timestamp": 1})
        + "\n"
        + json.dumps({"key": "text", "value": text, "timestamp": 2})
        + "\n"
    )
    pq.write_table(
        pa.table(
            {
                "key": [b"\xffparquet"],
                "value": pa.array([big[::-1]], pa.large_binary()),
                "timestamp": pa.array([3], pa.int64()),
            }
        ),
        folder / "b.parquet",
    )
    h = LogStore(str(tmp_path / "store")).log("big-0")
    ingest(h, build_config({"segment.bytes": 6 * 1024 * 1024}), folder)
    recs = list(iter_records(h))
    assert [(r.key, r.value) for r in recs] == [(b"b64", big), (b"text", text.encode()), (b"\xffparquet", big[::-1])]
    m = h.manifest()
    assert m.total_size == sum(16 + len(r.key) + len(r.value) for r in recs)
    assert len(m.segments) >= 3  # each 5 MB record rolled the segment (segment.bytes 6 MB)


def test_header_values_of_the_wrong_size_have_no_version(tmp_path, spark):
    """SPEC §6: the version is the last header named compaction.strategy.header, read as an 8-byte
    big-endian signed long; missing, null or not exactly 8 bytes = no version; names are case-sensitive;
    a version beats no version; ties (or both without) go to the highest offset."""
    config = build_config({"compaction.strategy": "header", "compaction.strategy.header": "v"})
    folder = tmp_path / "landing" / "versioned" / "partition=0"
    folder.mkdir(parents=True)
    shutil.copy(CORPUS / "good-header-versions.jsonl", folder)
    h = LogStore(str(tmp_path / "store")).log("versioned-0")
    ingest(h, config, folder)
    writer.roll(h)
    rep = engine.run(h, config, 10**9, spark=spark, force=True)
    assert rep.cleaned
    winners = {
        "a": "a-v5",
        "b": "b-no-header",
        "c": "c-null-value",
        "d": "d-other-case",
        "e": "e-v-minus-1",
        "f": "f-v2",
    }
    survivors = {r.key.decode(): r.value.decode() for r in iter_records(h)}
    assert survivors == winners and len(list(iter_records(h))) == len(winners)
    state = {bytes(r["key"]).decode(): bytes(r["value"]).decode() for r in latest_state_df(spark, h, config).collect()}
    assert state == winners


def test_topic_missing_from_the_topics_file_takes_the_defaults(tmp_path, capsys):
    """SPEC §2: per-topic configuration over a default set for all topics; a landing folder whose topic
    the file does not list is ingested with the defaults (Kafka would create it with the broker's)."""
    topics = tmp_path / "topics.yaml"
    topics.write_text(
        "defaults: {segment.bytes: 200, min.cleanable.dirty.ratio: 0.2}\ntopics: {known: {segment.bytes: 5000}}\n"
    )
    folder = tmp_path / "landing" / "unknown" / "partition=0"
    folder.mkdir(parents=True)
    shutil.copy(CORPUS / "good-binary.jsonl", folder)
    store = str(tmp_path / "store")
    rc, out, err = cli_run(
        capsys, "--store", store, "--topics", str(topics), "ingest", "--landing", str(tmp_path / "landing")
    )
    assert rc == 0, err
    ingested = json.loads(out)
    assert ingested["unknown-0"].pop("table")["committed"] is True  # the topic's table follows the log
    assert "within COMPACTION_MEMORY_BUDGET" in ingested["unknown-0"].pop("why")  # its route (ingest/route.py)
    assert ingested == {
        "unknown-0": {
            "files_ingested": 1,
            "records_appended": 7,
            "invalid_records_dropped": 0,
            "files": ["good-binary.jsonl"],
            "path": "in-process",
        }
    }
    rc, out, _ = cli_run(capsys, "--store", store, "--topics", str(topics), "describe", "unknown-0")
    desc = json.loads(out)
    assert desc["config"] == load_topics(topics).config_for("unknown").to_kafka()
    assert desc["config"]["segment.bytes"] == 200 and desc["config"]["min.cleanable.dirty.ratio"] == 0.2
    assert len(desc["segments"]) > 2  # rolled by the default segment.bytes (200), not the known topic's


# --- SPEC §2: every invalid configuration, from a topics file, refused before anything runs ----------------

INT_RULES = {
    "min.compaction.lag.ms": ">= 0",
    "max.compaction.lag.ms": ">= 1",
    "delete.retention.ms": ">= 0",
    "segment.bytes": ">= 1",
    "segment.ms": ">= 1",
    "retention.ms": ">= -1",
    "retention.bytes": ">= -1",
}
BELOW = {
    "min.compaction.lag.ms": -1,
    "max.compaction.lag.ms": 0,
    "delete.retention.ms": -1,
    "segment.bytes": 0,
    "segment.ms": 0,
    "retention.ms": -2,
    "retention.bytes": -2,
}
INVALID_CONFIGS = [
    # (topic overrides as YAML, key reported, rule stated)
    ('{cleanup.policy: ""}', "cleanup.policy", "must not be empty"),
    ("{cleanup.policy: purge}", "cleanup.policy", "unknown policy"),
    ("{cleanup.policy: 'compact,compact'}", "cleanup.policy", "must not repeat"),
    ("{cleanup.policy: 'compact,,delete'}", "cleanup.policy", "unknown policy"),
    ("{cleanup.policy: 5}", "cleanup.policy", "comma-separated list"),
    ("{cleanup.policy: Compact}", "cleanup.policy", "unknown policy"),
    ("{min.cleanable.dirty.ratio: -0.1}", "min.cleanable.dirty.ratio", "between 0 and 1"),
    ("{min.cleanable.dirty.ratio: 1.5}", "min.cleanable.dirty.ratio", "between 0 and 1"),
    ("{min.cleanable.dirty.ratio: '0.5'}", "min.cleanable.dirty.ratio", "must be a number"),
    ("{min.cleanable.dirty.ratio: true}", "min.cleanable.dirty.ratio", "must be a number"),
    ("{min.cleanable.dirty.ratio: .nan}", "min.cleanable.dirty.ratio", "must be a number"),
    ("{min.cleanable.dirty.ratio: .inf}", "min.cleanable.dirty.ratio", "between 0 and 1"),
    (
        "{min.compaction.lag.ms: 10, max.compaction.lag.ms: 5}",
        "min.compaction.lag.ms",
        "must be <= max.compaction.lag.ms",
    ),
    *[(f"{{{k}: {v}}}", k, INT_RULES[k]) for k, v in BELOW.items()],
    *[
        (f"{{{k}: {bad}}}", k, "must be an integer")
        for k in INT_RULES
        for bad in ("true", "'100'", "1.5", "10ms", "null")
    ],
    *[(f"{{{k}: 9223372036854775808}}", k, "signed 64-bit") for k in INT_RULES],
    ("{compaction.strategy: version}", "compaction.strategy", "one of offset, timestamp, header"),
    ("{compaction.strategy: Offset}", "compaction.strategy", "one of offset, timestamp, header"),
    ('{compaction.strategy: ""}', "compaction.strategy", "one of offset, timestamp, header"),
    ("{compaction.strategy: header}", "compaction.strategy.header", "is required"),
    ("{compaction.strategy: header, compaction.strategy.header: '  '}", "compaction.strategy.header", "non-blank"),
    ("{compaction.strategy: header, compaction.strategy.header: 5}", "compaction.strategy.header", "non-blank"),
    ("{segment.byte: 100}", "segment.byte", "unknown configuration key"),
]


@pytest.mark.parametrize("overrides,key,rule", INVALID_CONFIGS, ids=[c[0] for c in INVALID_CONFIGS])
def test_invalid_configuration_refused_before_anything_runs(tmp_path, capsys, overrides, key, rule):
    folder = tmp_path / "landing" / "orders" / "partition=0"
    folder.mkdir(parents=True)
    shutil.copy(CORPUS / "good-seed.jsonl", folder)
    landing_before = sorted(p.name for p in folder.iterdir())
    for where, text in (
        ("orders", f"topics:\n  orders: {overrides}\n"),
        ("<defaults>", f"defaults: {overrides}\ntopics: {{orders: {{}}}}\n"),
    ):
        topics = tmp_path / "topics.yaml"
        topics.write_text(text)
        value = (yaml.safe_load(overrides) or {}).get(key)
        rc, out, err = cli_run(
            capsys,
            "--store",
            str(tmp_path / "store"),
            "--topics",
            str(topics),
            "ingest",
            "--landing",
            str(tmp_path / "landing"),
        )
        assert rc == 1 and out == ""
        lines = errors_of(err)
        assert len(lines) == 1 and len(err.splitlines()) == 1, err
        msg = lines[0]
        assert where in msg and key in msg and rule in msg, msg
        assert repr(value) in msg or str(value) in msg, msg
        assert not (tmp_path / "store").exists()  # nothing ran
        assert sorted(p.name for p in folder.iterdir()) == landing_before

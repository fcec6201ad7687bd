"""A second engine reads the topic tables back: DuckDB's own Iceberg reader (`iceberg_scan`, which applies
Iceberg v2 position-delete files itself, not over pyiceberg's scan) reads what `compaction clean` and
`compaction table commit` committed, for each compaction strategy, delete files included. Its rows must be
pyiceberg's scan of the same snapshot and each log's latest state. DuckDB runs in a virtualenv of its own
(`.venv-duckdb`, scripts/setup-duckdb-iceberg.sh), since the product's pinned duckdb has no Iceberg
extension package; without it the test skips, and fails under CI=true."""

from __future__ import annotations

import base64
import json
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from pyiceberg.catalog import load_catalog
from pyiceberg.table import Table

from compaction_assets import cli

CATALOG, TOPIC, TABLE = "compaction", "users", "compaction.users"
PARTITIONS = (0, 1)
KEYS = 200
BASE_MS = 1_700_000_000_000
STRATEGIES = {
    "offset": {"compaction.strategy": "offset"},
    "timestamp": {"compaction.strategy": "timestamp"},
    "header": {"compaction.strategy": "header", "compaction.strategy.header": "version"},
}

# Run by .venv-duckdb's python: argv is the table's metadata file, then the snapshot ids to read. Prints
# JSON: the delete files of the metadata's current snapshot as DuckDB sees them, and each snapshot's rows
# (binary fields base64, headers as [name, value] pairs).
READER = """
import base64, glob, json, os, sys
import duckdb, duckdb_extension_avro, duckdb_extension_iceberg

def b64(data):
    return None if data is None else base64.b64encode(data).decode()

con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
for module in (duckdb_extension_avro, duckdb_extension_iceberg):
    pattern = os.path.join(os.path.dirname(module.__file__), "extensions", "*", "*.duckdb_extension")
    con.execute(f"LOAD '{glob.glob(pattern)[0]}'")
metadata, snapshot_ids = sys.argv[1], [int(s) for s in sys.argv[2:]]
deletes = "SELECT count(*) FROM iceberg_metadata(?) WHERE manifest_content = 'DELETE'"
columns = '"key", "value", "partition", "offset", "timestamp", "headers"'
scan = f"SELECT {columns} FROM iceberg_scan(?, snapshot_from_id => ?)"
out = {"delete_files": con.execute(deletes, [metadata]).fetchone()[0], "snapshots": {}}
for snapshot_id in snapshot_ids:
    out["snapshots"][str(snapshot_id)] = [
        [b64(k), b64(v), p, o, t, [[h["name"], b64(h["value"])] for h in headers or []]]
        for k, v, p, o, t, headers in con.execute(scan, [metadata, snapshot_id]).fetchall()
    ]
print(json.dumps(out))
"""


@dataclass(frozen=True, order=True)
class Row:
    """One row of a topic's table, as either engine reads it."""

    key: bytes
    value: bytes | None
    partition: int
    offset: int
    timestamp: int
    headers: tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True)
class DuckdbRead:
    """What DuckDB read of a table: its current snapshot's delete files, and each snapshot's rows asked for."""

    delete_files: int
    rows: dict[int, list[Row]]


def _unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def _duckdb_read(python: Path, metadata: str, snapshot_ids: list[int]) -> DuckdbRead:
    """The snapshots' rows as DuckDB's iceberg_scan reads them, in a process of .venv-duckdb's python."""
    done = subprocess.run(
        [str(python), "-c", READER, metadata, *map(str, snapshot_ids)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    rows = {
        int(snapshot_id): [
            Row(_unb64(k) or b"", _unb64(v), p, o, t, tuple((n, _unb64(hv)) for n, hv in headers))
            for k, v, p, o, t, headers in listed
        ]
        for snapshot_id, listed in out["snapshots"].items()
    }
    return DuckdbRead(out["delete_files"], rows)


def _pyiceberg_rows(table: Table, snapshot_id: int) -> list[Row]:
    """The snapshot's rows as pyiceberg's scan reads them (it applies the delete files too)."""
    return [
        Row(
            r["key"],
            r["value"],
            r["partition"],
            r["offset"],
            r["timestamp"],
            tuple((h["name"], h["value"]) for h in r["headers"]),
        )
        for r in table.scan(snapshot_id=snapshot_id).to_arrow().to_pylist()
    ]


class Compaction:
    """The product's command line on one store, in this process; each command's stdout returned."""

    def __init__(self, store: str, capsys: pytest.CaptureFixture[str]) -> None:
        self.store, self.capsys = store, capsys

    def __call__(self, *args: str) -> str:
        self.capsys.readouterr()
        code = cli.main(["--store", self.store, *args])
        out, err = self.capsys.readouterr()
        assert code == 0, (args, err)
        return out


def _record(key: str, value: str | None, ts: int, version: int) -> dict:
    """One record as `append` reads it from JSON Lines, its version an integer header."""
    return {"key": key, "value": value, "timestamp": BASE_MS + ts, "headers": [["version", version]]}


def _first_records(partition: int) -> list[dict]:
    """Every key once, then updates of the first fifty (later offset, timestamp and version: they win)."""
    first = [_record(f"k{i}", f"p{partition}-v{i}", i, i) for i in range(KEYS)]
    return first + [_record(f"k{i}", f"p{partition}-u{i}", 1000 + i, 1000 + i) for i in range(50)]


def _change_records(partition: int) -> list[dict]:
    """Updates (k0-k19), tombstones (k20-k29), new keys, and records of k30-k34 appended last but older by
    timestamp and version: under the offset strategy they win, under the others they lose."""
    return (
        [_record(f"k{i}", f"p{partition}-w{i}", 2000 + i, 2000 + i) for i in range(20)]
        + [_record(f"k{i}", None, 2000 + i, 2000 + i) for i in range(20, 30)]
        + [_record(f"new{i}", f"p{partition}-n{i}", 2000, 1) for i in range(5)]
        + [_record(f"k{i}", "late", 0, 0) for i in range(30, 35)]
    )


def _append_roll_clean_commit(compaction: Compaction, folder: Path, records: Callable[[int], list[dict]]) -> list[dict]:
    """Append each partition's records, seal them, clean the logs and commit the topic's table, its logs in one
    snapshot (the commands that change the logs leave it to that commit: `--no-table`): the commit's result
    for each log."""
    logs = [f"{TOPIC}-{p}" for p in PARTITIONS]
    for p, log in zip(PARTITIONS, logs):
        lines = folder / f"{log}-{len(list(folder.iterdir()))}.jsonl"
        lines.write_text("".join(json.dumps(r) + "\n" for r in records(p)))
        compaction("append", log, str(lines), "--no-table")
        compaction("roll", log, "--no-table")
    compaction("clean", "--force", "--no-table", *logs)
    return json.loads(compaction("table", "commit", *logs))


def _latest_state(compaction: Compaction) -> dict[tuple[int, bytes], tuple[bytes | None, int]]:
    """{(partition, key): (value, offset)} of every log's latest state, as `compaction latest-state` prints it."""
    state = {}
    for p in PARTITIONS:
        for line in compaction("latest-state", f"{TOPIC}-{p}").splitlines():
            r = json.loads(line)
            key = r["key"].encode() if "key" in r else base64.b64decode(r["key_b64"])
            value = r["value"].encode() if r.get("value") is not None else _unb64(r.get("value_b64"))
            state[(p, key)] = (value, r["offset"])
    return state


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_duckdb_reads_the_committed_table_and_its_delete_files(strategy, tmp_path, capsys, monkeypatch, duckdb_python):
    for name in ("COMPACTION_TABLE_CATALOG_URI", "COMPACTION_TABLE_CATALOG_TYPE"):
        monkeypatch.delenv(name, raising=False)  # the default catalog, beside the store
    store = tmp_path / "store"
    compaction = Compaction(str(store), capsys)
    (tmp_path / "topics.yaml").write_text(json.dumps({"topics": {TOPIC: STRATEGIES[strategy]}}))
    compaction("config", "apply", str(tmp_path / "topics.yaml"))
    (tmp_path / "in").mkdir()
    first = _append_roll_clean_commit(compaction, tmp_path / "in", _first_records)
    change = _append_roll_clean_commit(compaction, tmp_path / "in", _change_records)
    assert all(r["committed"] for r in first + change) and len({r["snapshot_id"] for r in change}) == 1
    assert [r["delete_files_added"] > 0 and r["files_removed"] == 0 for r in change] == [True] * len(PARTITIONS)
    table = load_catalog(CATALOG, type="sql", uri=f"sqlite:///{store}/_tables/catalog.db").load_table(TABLE)
    snapshot = table.current_snapshot()
    assert snapshot is not None and snapshot.summary is not None and snapshot.snapshot_id == change[0]["snapshot_id"]
    summary = snapshot.summary.additional_properties  # position deletes in this snapshot: no rewrite hid them
    assert int(summary["added-position-delete-files"]) >= len(PARTITIONS) and int(summary["added-position-deletes"]) > 0

    read = _duckdb_read(duckdb_python, table.metadata_location, [first[0]["snapshot_id"], snapshot.snapshot_id])
    assert read.delete_files == int(summary["total-delete-files"])
    for snapshot_id, rows in read.rows.items():
        assert sorted(rows) == sorted(_pyiceberg_rows(table, snapshot_id))
    rows = read.rows[snapshot.snapshot_id]
    latest = _latest_state(compaction)
    assert len(rows) == len(latest) and {(r.partition, r.key): (r.value, r.offset) for r in rows} == latest
    before = {(r.partition, r.key) for r in read.rows[first[0]["snapshot_id"]]}
    assert (0, b"k20") in before and (0, b"k20") not in latest  # a tombstone's row masked, not rewritten
    late = {r.value for r in rows if r.key == b"k30"}
    assert late == ({b"late"} if strategy == "offset" else {b"p0-u30", b"p1-u30"})

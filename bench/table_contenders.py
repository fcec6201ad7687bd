"""The topic table after a 1% change, against other engines (issue 56):
`python -m bench.table_contenders --records 5000000 --keys 500000 --change 0.01 --rounds 3`.

Set-up (untimed): a seeded log (bench/gen.py, 100-byte values) whose table is committed once (steady
state: the next commit is of the change alone); the same latest state as a Delta table and as a plain
pyiceberg table (bench/table_merges.py, no product code); then the change, `--change` of the records
(bench/gen.py's updates: 90% to existing keys, 10% new keys, 5% tombstones), as one Parquet landing file.

Each contender then brings its table up to date, in a process of its own (cold), timed from outside
(wall, and CPU: the child's user + system time), the contenders in turn for `--rounds` rounds, each run
on fresh copies of the stores:

- `ours: ingest`: `compaction ingest`, which commits the topic's table before it returns;
- `ours: ingest --no-table`: the same without the table, so that the table's share shows;
- `ours: table commit`: `compaction table commit` alone, after an (untimed) `ingest --no-table`;
- `delta-rs MERGE`, `pyiceberg upsert + delete`, `DuckDB recompute` (bench/table_merges.py).

After each run (untimed) its result is checked against the product's latest state of the log after
the change (`state/latest_state.py`): the rows, and the value (or absence) of a sample of keys, the
change's among them. A wrong result stops the bench. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bench import gen, table_merges
from bench.children import ChildRun, Rounds, timed
from compaction_assets.state.latest_state import latest_state_table
from compaction_assets.store.log_store import LogStore, wall_ms
from compaction_assets.table.commit.commit import commit_log
from compaction_assets.topics.config_store import ConfigStore

ROOT = Path(__file__).resolve().parents[1]
TOPIC, LOG = "bench", "bench-0"
VALUE_BYTES = 100
SEGMENT_BYTES = 64 << 20
SEED = 20240601
SAMPLE_KEYS = 2000


@dataclass(frozen=True)
class Places:
    """The bench's folders: the pristine stores, the live copies each run works on (at one path, since
    the Iceberg catalogs record absolute paths), and the landing area holding the change."""

    work: Path

    def pristine(self, name: str) -> Path:
        return self.work / "pristine" / name

    def live(self, name: str) -> Path:
        return self.work / "live" / name

    @property
    def landing(self) -> Path:
        return self.work / "landing"

    @property
    def change(self) -> Path:
        return self.landing / TOPIC / "partition=0" / "change.parquet"

    def restore(self, name: str) -> Path:
        """A fresh copy of a pristine store at its live path."""
        shutil.rmtree(self.live(name), ignore_errors=True)
        shutil.copytree(self.pristine(name), self.live(name))
        return self.live(name)


@dataclass(frozen=True)
class Setup:
    """What the set-up made: the log's end offset before the change, the change's records, and the
    product's latest state after the change (what every contender must end with)."""

    records: int
    keys: int
    cleaned: bool
    log_records_before: int
    state_rows_before: int
    log_end_before: int
    change_records: int
    segment_files: tuple[str, ...]
    expected: pa.Table
    sample: pa.Array


@dataclass
class Contender:
    """One way of bringing the table up to date: the store it works on, an untimed step before it, its
    timed command, and how to read its result (key and value columns)."""

    name: str
    store: str
    argv: list[str]
    result: Callable[[], pa.Table]
    before: list[str] | None = None
    runs: list[ChildRun] = field(default_factory=list)


def _cli(places: Places, *args: str) -> list[str]:
    return [sys.executable, "-m", "compaction_assets", "--store", str(places.live("store")), *args]


def _env() -> dict[str, str]:
    """This checkout's code, tables on, no setting of the caller's store or Spark."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMPACTION_", "SPARK_"))}
    return {**env, "PYTHONPATH": str(ROOT), "COMPACTION_TABLES": "1"}


def _product_table(places: Places) -> pa.Table:
    """The topic table's rows, read as docs/table.md reads it downstream: a catalog opened for this read
    (the product's own catalog of this process would hold a connection to a replaced copy's database)."""
    from pyiceberg.catalog import load_catalog

    uri = f"sqlite:///{places.live('store')}/_tables/catalog.db"
    table = load_catalog("compaction", type="sql", uri=uri).load_table(f"compaction.{TOPIC}")
    return table.scan(selected_fields=("key", "value")).to_arrow()


def _log_state(places: Places) -> pa.Table:
    handle = LogStore(str(places.live("store"))).log(LOG)
    return latest_state_table(handle, gen.topic_config(SEGMENT_BYTES))


def _clean(handle, cfg) -> None:
    """A forced cleaning of the seeded log, with Spark in this process (untimed), stopped after it."""
    from compaction_assets.cleaning import engine
    from compaction_assets.spark import get_spark

    spark = get_spark()
    engine.run(handle, cfg, gen.NOW, spark=spark, force=True)
    spark.stop()


def build(places: Places, records: int, keys: int, change: float, clean: bool) -> Setup:
    """The pristine stores (the log cleaned first with `clean`), the change's landing file and the
    product's state after the change."""
    cfg = gen.topic_config(SEGMENT_BYTES)
    store = LogStore(str(places.live("store")))
    handle = store.log(LOG, must_exist=False)
    ConfigStore(store.storage).set_topic(TOPIC, {"segment.bytes": SEGMENT_BYTES}, "bench.table_contenders", wall_ms())
    gen.generate(handle, cfg, records, keys, VALUE_BYTES, SEED)
    if clean:
        _clean(handle, cfg)
    commit_log(handle, cfg)
    state = latest_state_table(handle, cfg)
    table_merges.build_delta(state, str(places.live("delta")))
    table_merges.build_iceberg(state, str(places.live("iceberg")))
    for name in ("store", "delta", "iceberg"):
        places.pristine(name).parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(places.live(name)), str(places.pristine(name)))
    manifest = LogStore(str(places.pristine("store"))).log(LOG).manifest()
    places.change.parent.mkdir(parents=True)
    changed = gen.write_updates(
        str(places.change), manifest.log_end_offset, cfg, round(records * change), keys, VALUE_BYTES, seed=1
    )
    # the product's latest state after the change: the log's own (no table), after the CLI's ingest
    places.restore("store")
    timed(_cli(places, "ingest", LOG, "--landing", str(places.landing), "--no-table"), _env(), str(places.work))
    expected = _log_state(places).select(["key", "value"])
    return Setup(
        records=records,
        keys=keys,
        cleaned=clean,
        log_records_before=manifest.total_records,
        state_rows_before=state.num_rows,
        log_end_before=manifest.log_end_offset,
        change_records=changed,
        segment_files=tuple(LogStore(str(places.pristine("store"))).log(LOG).path(f.name) for f in manifest.files()),
        expected=expected,
        sample=_sample(expected, pq.read_table(places.change).column("key")),
    )


def _sample(expected: pa.Table, change_keys: pa.ChunkedArray) -> pa.Array:
    """Keys to compare: half of them the change's (updated, new, tombstoned), half any of the state's."""
    rng = np.random.default_rng(SEED)
    half = SAMPLE_KEYS // 2
    picked = [
        change_keys.take(rng.choice(len(change_keys), min(half, len(change_keys)), replace=False)),
        expected.column("key").take(rng.choice(expected.num_rows, min(half, expected.num_rows), replace=False)),
    ]
    return pc.unique(pa.chunked_array([c for p in picked for c in pa.chunked_array(p).chunks]))


def check(name: str, got: pa.Table, setup: Setup) -> None:
    """Fail unless `got` (key, value) has the expected rows and the sample keys' expected values."""
    if got.num_rows != setup.expected.num_rows:
        raise AssertionError(f"{name}: {got.num_rows} rows, the latest state has {setup.expected.num_rows}")

    def values(table: pa.Table) -> dict[bytes, bytes | None]:
        picked = table.filter(pc.is_in(table.column("key"), value_set=setup.sample))
        return dict(zip(picked.column("key").to_pylist(), picked.column("value").to_pylist()))

    want, have = values(setup.expected), values(got)
    wrong = [k for k in setup.sample.to_pylist() if want.get(k) != have.get(k)]
    if wrong:
        raise AssertionError(f"{name}: {len(wrong)} of {len(setup.sample)} sample keys differ, e.g. {wrong[0]!r}")


def contenders(places: Places, setup: Setup) -> list[Contender]:
    ingest = ["ingest", LOG, "--landing", str(places.landing)]
    spec_dir = places.work / "specs"
    spec_dir.mkdir(exist_ok=True)

    def merge(kind: str, table: Path, segments: tuple[str, ...] = ()) -> list[str]:
        spec = table_merges.MergeSpec(str(table), str(places.change), setup.log_end_before, segments)
        return [sys.executable, "-m", "bench.table_merges", kind, spec.write(str(spec_dir / f"{kind}.json"))]

    duck_out = places.live("duckdb") / "state.parquet"
    return [
        Contender("ours: ingest", "store", _cli(places, *ingest), lambda: _product_table(places)),
        Contender("ours: ingest --no-table", "store", _cli(places, *ingest, "--no-table"), lambda: _log_state(places)),
        Contender(
            "ours: table commit",
            "store",
            _cli(places, "table", "commit", LOG),
            lambda: _product_table(places),
            before=_cli(places, *ingest, "--no-table"),
        ),
        Contender(
            "delta-rs MERGE",
            "delta",
            merge("delta", places.live("delta")),
            lambda: table_merges.read_delta(str(places.live("delta"))),
        ),
        Contender(
            "pyiceberg upsert + delete",
            "iceberg",
            merge("iceberg", places.live("iceberg")),
            lambda: table_merges.read_iceberg(str(places.live("iceberg"))),
        ),
        Contender(
            "DuckDB recompute",
            "duckdb",
            merge("duckdb", duck_out, setup.segment_files),
            lambda: pq.read_table(duck_out, columns=["key", "value"]),
        ),
    ]


def run_round(places: Places, setup: Setup, contender: Contender) -> None:
    """One run of a contender on fresh copies, timed, then its result checked."""
    if contender.store == "duckdb":
        shutil.rmtree(places.live("duckdb"), ignore_errors=True)
        places.live("duckdb").mkdir(parents=True)
    else:
        places.restore(contender.store)
    if contender.before:
        timed(contender.before, _env(), str(places.work))
    contender.runs.append(timed(contender.argv, _env(), str(places.work)))
    check(contender.name, contender.result(), setup)


def _versions() -> dict[str, str]:
    import importlib.metadata as md

    return {name: md.version(name) for name in ("deltalake", "pyiceberg", "duckdb", "pyarrow")}


def report(setup: Setup, ran: list[Contender]) -> dict:
    figures = {c.name: asdict(Rounds.of(c.runs)) for c in ran}
    ours = figures["ours: ingest"]
    others = {c.name: figures[c.name] for c in ran if not c.name.startswith("ours")}
    fastest = min(others, key=lambda name: others[name]["cpu_median_s"])
    return {
        "records": setup.records,
        "keys": setup.keys,
        "cleaned": setup.cleaned,
        "log_records_before": setup.log_records_before,
        "state_rows_before": setup.state_rows_before,
        "change_records": setup.change_records,
        "state_rows_after": setup.expected.num_rows,
        "versions": _versions(),
        "contenders": figures,
        "fastest_other_by_cpu": fastest,
        "ours_over_fastest_cpu": round(ours["cpu_median_s"] / others[fastest]["cpu_median_s"], 2),
        "ours_over_fastest_wall": round(ours["wall_median_s"] / others[fastest]["wall_median_s"], 2),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--records", type=int, default=500_000)
    p.add_argument("--keys", type=int, default=50_000)
    p.add_argument("--change", type=float, default=0.01, help="the change's records, a fraction of the log's")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--clean", action="store_true", help="clean the seeded log (forced) before its table's commit")
    p.add_argument("--work", default=None, help="a folder for the stores (default: a temporary one, removed)")
    args = p.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="table-contenders-"))
    if args.work and work.exists() and any(work.iterdir()):
        p.error(f"--work {work} is not empty; the bench writes its stores into an empty (or new) folder")
    try:
        places = Places(work)
        setup = build(places, args.records, args.keys, args.change, args.clean)
        ran = contenders(places, setup)
        for _ in range(args.rounds):
            for contender in ran:
                run_round(places, setup, contender)
        print(json.dumps(report(setup, ran), indent=2))
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

"""The hand-written pieces of the offset map against what maintained libraries give, in CPU seconds.

    PYTHONPATH=. .venv/bin/python -m bench.libraries [--rows 5000000 20000000] [--repeats 3] [--batches 10]
                                                     [--json FILE] [--pieces winners membership numbering split imports]

The columns a cleaning decides on are built in memory as the benchmark's logs have them (bench/gen.py:
keys b"key-" + 10 digits, binary, about 10 records a key; offsets ascending int64; a chunk a segment file,
20 files at least and 500,000 rows a file at most), then each piece of the product is timed against the
libraries' ways to the same result, and every result is checked equal to the product's on every run:

- winners: `keys.highest_offsets` (each key's highest offset, as a mask) against pyarrow's
  `Table.group_by(...).aggregate` and `is_in`, DuckDB (a group-by and a semi-join, or a window), polars
  (a window) and DataFusion (a group-by and a semi-join);
- membership: `key_set.KeySet` built once and asked about `--batches` batches, against `pc.is_in` a batch
  (and once over every batch held whole), DuckDB's and DataFusion's semi-join a batch and polars' `is_in` a batch;
- numbering: `keys.key_numbers` against `pc.dictionary_encode`, `pc.unique` + `pc.index_in` and polars'
  dense rank;
- split: `segments/offset_map.py`'s `split_by_key` a file at a time against the product's hash with pyarrow's
  `sort_indices` and `take`, and polars' `hash` and `partition_by`;
- imports: what `segments/arrays.py` and `store/fs.py` avoid, in CPU seconds of a fresh interpreter each:
  `pa.array` against `arrays.from_numpy`, `pq.read_table` against `pq.ParquetFile(...).read()`.

What is measured is the CPU time of this process (every thread's: the libraries run a thread a core, the
product mostly one), with the wall time beside it: the machine is shared, and CPU seconds are the work a
way costs whatever else runs. The contenders of a piece run one after the other in a round, in an order
that turns round by round, and the median of `--repeats` rounds is reported. A round at a small size
runs first, unreported, so that each library's import and start are not counted.

polars and DataFusion are optional (not dependencies of the project): a contender whose library is
missing is left out (the versions line says "not installed").
"""

from __future__ import annotations

import argparse
import datetime
import gc
import itertools
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bench.gen import TS0, key_array
from compaction_assets.cleaning.tuning import CleanerTuning
from compaction_assets.segments.arrays import from_numpy, to_numpy
from compaction_assets.segments.offset_map import (
    KeySet,
    highest_offsets,
    key_hash,
    key_numbers,
    one_chunk,
    split_by_key,
)

RECORDS_PER_KEY = 10
FILE_ROWS = 500_000  # rows of a segment file at most (bench/sweep.py: one file per 500,000 records)
MIN_FILES = 20
TOMBSTONE_FRACTION = 0.05
VALUE_BYTES = 100
WARM_UP_ROWS = 100_000
PIECES = ("winners", "membership", "numbering", "split", "imports")


def optional(name: str) -> Any:
    """The module `name`, or None when it is not installed."""
    try:
        return __import__(name)
    except ImportError:
        return None


duckdb = optional("duckdb")
pl = optional("polars")
datafusion = optional("datafusion")


@dataclass(frozen=True)
class Columns:
    """The narrow columns of a range, a table a segment file, and the keys' reference numbering (for the
    checks only)."""

    files: list[pa.Table]
    table: pa.Table
    key_number: np.ndarray
    key_count: int


def make_columns(rows: int, seed: int) -> Columns:
    """`rows` rows over rows / 10 keys, offsets 0 to rows - 1, as the decision reads them."""
    rng = np.random.default_rng([seed, rows])
    files_count = max(MIN_FILES, -(-rows // FILE_ROWS))
    bounds = np.linspace(0, rows, files_count + 1).astype(np.int64)
    files = []
    for start, end in itertools.pairwise(bounds):
        n = int(end - start)
        tomb = rng.random(n) < TOMBSTONE_FRACTION
        offsets = np.arange(start, end, dtype=np.int64)
        files.append(
            pa.table(
                {
                    "offset": from_numpy(offsets),
                    "key": key_array(rng.integers(0, max(1, rows // RECORDS_PER_KEY), n)),
                    "timestamp": from_numpy(TS0 + offsets),
                    "is_tombstone": from_numpy(tomb),
                    "delete_horizon": pa.nulls(n, pa.int64()),
                    "record_size": from_numpy(np.where(tomb, 30, 30 + VALUE_BYTES).astype(np.int64)),
                }
            )
        )
    table = pa.concat_tables(files)
    key_number, key_count = key_numbers(table.column("key"))
    return Columns(files, table, key_number, key_count)


@dataclass(frozen=True)
class Contender:
    """A way to a piece's result: `run` is timed, `canonical` (not timed) turns its result into what
    the piece compares."""

    name: str
    run: Callable[[], Any]
    canonical: Callable[[Any], Any]


@dataclass(frozen=True)
class Piece:
    """A piece of the product (its first contender) and the libraries' ways to the same result."""

    name: str
    contenders: list[Contender]
    same: Callable[[Any, Any], bool]


@dataclass(frozen=True)
class Timing:
    piece: str
    rows: int
    contender: str
    cpu_seconds: float
    wall_seconds: float
    cpu_runs: list[float]
    wall_runs: list[float]


# --- winners ---------------------------------------------------------------------------------------------


def winners_piece(columns: Columns) -> Piece:
    table = columns.table.select(["key", "offset"])
    offsets = to_numpy(table.column("offset"))

    # decide/arrow_decision.py hands the hashes its split worked out (it needs them for the buckets in any case)
    hashes = key_hash(table.column("key"))

    def masked(mask: Any) -> np.ndarray:
        return offsets[to_numpy(mask)]

    def arrow_group_by() -> Any:
        best = table.group_by("key").aggregate([("offset", "max")])
        return pc.is_in(table.column("offset"), value_set=one_chunk(best.column("offset_max")))

    contenders = [
        Contender("product highest_offsets", lambda: highest_offsets(table), masked),
        Contender("product highest_offsets, hashes given", lambda: highest_offsets(table, hashes), masked),
        Contender("pyarrow group_by + is_in", arrow_group_by, masked),
    ]
    semi_join = 'SELECT "offset" FROM t WHERE "offset" IN (SELECT max("offset") FROM t GROUP BY key)'
    if duckdb is not None:
        window = 'SELECT "offset" FROM t QUALIFY "offset" = max("offset") OVER (PARTITION BY key)'
        contenders += [
            Contender("duckdb group-by + semi-join", lambda: duck_query(semi_join, t=table), sorted_offsets),
            Contender("duckdb window", lambda: duck_query(window, t=table), sorted_offsets),
        ]
    if pl is not None:

        def polars_window() -> Any:
            frame = pl.from_arrow(table)
            return frame.select(pl.col("offset") == pl.col("offset").max().over("key")).to_series()

        contenders.append(Contender("polars window", polars_window, lambda s: offsets[s.to_numpy()]))
    if datafusion is not None:
        contenders.append(
            Contender("datafusion group-by + semi-join", lambda: fusion_query(semi_join, t=table), sorted_offsets)
        )
    return Piece("winners", contenders, lambda a, b: np.array_equal(a, b))


def duck_query(sql: str, **tables: pa.Table) -> pa.Table:
    """`sql` run by DuckDB over Arrow `tables` (a new connection: nothing cached between runs)."""
    con = duckdb.connect()
    for name, table in tables.items():
        con.register(name, table)
    result = con.sql(sql).to_arrow_table()
    con.close()
    return result


def fusion_query(sql: str, **tables: pa.Table) -> pa.Table:
    """`sql` run by DataFusion over Arrow `tables`."""
    ctx = datafusion.SessionContext()
    for name, table in tables.items():
        ctx.from_arrow(table, name)
    return ctx.sql(sql).to_arrow_table()


def sorted_offsets(result: pa.Table) -> np.ndarray:
    return np.sort(to_numpy(result.column(0)))


# --- membership ------------------------------------------------------------------------------------------


def membership_piece(columns: Columns, batches_count: int) -> Piece:
    """The newest tenth of the rows' keys as the set (the probe's newer records' keys, a key as often
    as it has records), asked about every row's key in `batches_count` batches."""
    keys = columns.table.column("key")
    rows = len(keys)
    newest = keys.slice(rows - rows // 10)
    bounds = np.linspace(0, rows, batches_count + 1).astype(np.int64)
    batches = [keys.slice(int(a), int(b - a)) for a, b in itertools.pairwise(bounds)]

    def product() -> np.ndarray:
        key_set = KeySet(newest)
        return np.concatenate([key_set.contains(batch) for batch in batches])

    def arrow_per_batch() -> np.ndarray:
        value_set = one_chunk(newest)
        return np.concatenate([to_numpy(pc.is_in(batch, value_set=value_set)) for batch in batches])

    contenders = [
        Contender("product KeySet", product, same_value),
        Contender("pyarrow is_in a batch", arrow_per_batch, same_value),
        Contender("pyarrow is_in once (keys whole)", lambda: pc.is_in(keys, value_set=one_chunk(newest)), to_numpy),
    ]
    set_table = pa.table({"key": newest})
    if duckdb is not None:
        contenders.append(
            Contender("duckdb semi-join a batch", lambda: found_rows(duck_query, batches, set_table), same_value)
        )
    if pl is not None:

        def polars_per_batch() -> np.ndarray:
            values = pl.from_arrow(newest).implode()
            return np.concatenate([pl.from_arrow(b).is_in(values).to_numpy() for b in batches])

        contenders.append(Contender("polars is_in a batch", polars_per_batch, same_value))
    if datafusion is not None:
        contenders.append(
            Contender("datafusion semi-join a batch", lambda: found_rows(fusion_query, batches, set_table), same_value)
        )
    return Piece("membership", contenders, lambda a, b: np.array_equal(a, b))


def found_rows(query: Callable[..., pa.Table], batches: list[pa.ChunkedArray], set_table: pa.Table) -> np.ndarray:
    """Whether each key of the batches is in `set_table`, by an engine's semi-join a batch: the rows
    found come back as their numbers (neither engine keeps a batch's order through a join; DataFusion plans
    `IN (subquery)` only as a filter)."""
    masks = []
    for batch in batches:
        numbered = pa.table({"key": batch, "row": from_numpy(np.arange(len(batch), dtype=np.int64))})
        mask = np.zeros(len(batch), bool)
        mask[to_numpy(query(SEMI_JOIN, s=set_table, b=numbered).column(0))] = True
        masks.append(mask)
    return np.concatenate(masks)


SEMI_JOIN = "SELECT row FROM b WHERE key IN (SELECT key FROM s)"


def same_value(value: Any) -> Any:
    return value


# --- numbering -------------------------------------------------------------------------------------------


def numbering_piece(columns: Columns) -> Piece:
    keys = columns.table.column("key")

    def dictionary() -> tuple[np.ndarray, int]:
        encoded = pc.dictionary_encode(one_chunk(keys))
        return to_numpy(encoded.indices).astype(np.int64), len(encoded.dictionary)

    def unique_index_in() -> tuple[np.ndarray, int]:
        whole = one_chunk(keys)
        distinct = pc.unique(whole)
        return to_numpy(pc.index_in(whole, value_set=distinct)).astype(np.int64), len(distinct)

    contenders = [
        Contender("product key_numbers", lambda: key_numbers(keys), same_value),
        Contender("pyarrow dictionary_encode", dictionary, same_value),
        Contender("pyarrow unique + index_in", unique_index_in, same_value),
    ]
    if pl is not None:

        def dense_rank(ranks: Any) -> tuple[np.ndarray, int]:
            numbers = ranks.to_numpy().astype(np.int64) - 1
            return numbers, int(numbers.max()) + 1 if len(numbers) else 0

        contenders.append(Contender("polars rank dense", lambda: pl.from_arrow(keys).rank("dense"), dense_rank))
    return Piece("numbering", contenders, same_numbering)


def same_numbering(a: tuple[np.ndarray, int], b: tuple[np.ndarray, int]) -> bool:
    """Whether two numberings group the rows alike (one number of a for one number of b, both ways)."""
    (left, count), (right, other_count) = a, b
    if count != other_count or len(left) != len(right):
        return False
    mapped = np.full(count, -1, np.int64)
    mapped[left] = right
    return bool((mapped[left] == right).all()) and len(np.unique(mapped)) == count


# --- split -----------------------------------------------------------------------------------------------


def buckets_for(rows: int) -> int:
    """The buckets a decision here uses (placement.py): at most the tuning's rows a bucket, whole rounds
    of a bucket a core."""
    cores = os.cpu_count() or 1
    buckets = max(1, -(-rows // CleanerTuning().local_decision_bucket_rows))
    return -(-buckets // cores) * cores if buckets > 1 else 1


def split_piece(columns: Columns) -> Piece:
    """Every file's rows split into the range's buckets by a hash of their key (the hash kept beside)."""
    buckets = max(2, buckets_for(len(columns.table)))

    def arrow_sort_take(file: pa.Table) -> list[pa.Table]:
        hashes = key_hash(file.column("key"))
        label = (hashes % np.uint64(buckets)).astype(np.int64)
        order = pc.sort_indices(from_numpy(label))  # a stable sort: a bucket's rows stay in file order
        ordered = file.take(order)
        counts = np.bincount(label, minlength=buckets)
        starts = np.cumsum(counts) - counts
        return [ordered.slice(int(starts[b]), int(counts[b])) for b in range(buckets)]

    def arrow_parts(files: list[list[pa.Table]]) -> tuple[bool, bool, bool]:
        return split_summary([list(enumerate(part)) for part in files], columns)

    contenders = [
        Contender("product split_by_key", lambda: [split_by_key(f, buckets) for f in columns.files], arrow_parts),
        Contender(
            "pyarrow sort_indices + take (product hash)",
            lambda: [arrow_sort_take(f) for f in columns.files],
            arrow_parts,
        ),
    ]
    if pl is not None:

        def polars_partition(file: pa.Table) -> dict:
            frame = pl.from_arrow(file).with_columns(pl.col("key").hash().alias("key_hash"))
            frame = frame.with_columns((pl.col("key_hash") % buckets).alias("bucket"))
            return frame.partition_by("bucket", maintain_order=True, as_dict=True)

        def polars_parts(files: list[dict]) -> tuple[bool, bool, bool]:
            return split_summary([[(int(label[0]), part) for label, part in f.items()] for f in files], columns)

        contenders.append(
            Contender("polars hash + partition_by", lambda: [polars_partition(f) for f in columns.files], polars_parts)
        )
    return Piece("split", contenders, lambda a, b: a == b == (True, True, True))


def split_summary(files: list[list[tuple[int, Any]]], columns: Columns) -> tuple[bool, bool, bool]:
    """(every row in one bucket once, every key's rows in one bucket, each part's rows in file order) of
    the parts (bucket, Arrow table or polars frame) of every file."""
    rows = len(columns.table)
    label = np.full(rows, -1, np.int64)
    seen, ordered = 0, True
    for parts in files:
        for bucket, part in parts:
            offsets = np.asarray(
                part["offset"].to_numpy()
                if pl is not None and isinstance(part, pl.DataFrame)
                else to_numpy(part.column("offset"))
            )
            label[offsets] = bucket
            seen += len(offsets)
            ordered = ordered and bool(np.all(np.diff(offsets) > 0))
    complete = seen == rows and bool((label >= 0).all())
    bucket_of_key = np.full(columns.key_count, -1, np.int64)
    bucket_of_key[columns.key_number] = label
    return complete, bool((bucket_of_key[columns.key_number] == label).all()), ordered


# --- rounds ----------------------------------------------------------------------------------------------


def build_pieces(names: list[str], columns: Columns, batches: int) -> list[Piece]:
    builders: dict[str, Callable[[], Piece]] = {
        "winners": lambda: winners_piece(columns),
        "membership": lambda: membership_piece(columns, batches),
        "numbering": lambda: numbering_piece(columns),
        "split": lambda: split_piece(columns),
    }
    return [builders[name]() for name in names if name in builders]


def run_round(piece: Piece, turn: int) -> dict[str, tuple[float, float]]:
    """Each contender once (starting at `turn`), its (CPU, wall) seconds; every result checked against
    the product's."""
    count = len(piece.contenders)
    seconds: dict[str, tuple[float, float]] = {}
    results: dict[str, Any] = {}
    for i in range(count):
        contender = piece.contenders[(turn + i) % count]
        gc.collect()
        cpu, wall = time.process_time(), time.perf_counter()
        result = contender.run()
        seconds[contender.name] = (time.process_time() - cpu, time.perf_counter() - wall)
        results[contender.name] = contender.canonical(result)
        del result
    reference = results[piece.contenders[0].name]
    for name, result in results.items():
        if not piece.same(reference, result):
            raise AssertionError(f"{piece.name}: {name} does not give the product's result")
    return seconds


def measure(piece: Piece, rows: int, repeats: int) -> list[Timing]:
    runs: dict[str, list[tuple[float, float]]] = {c.name: [] for c in piece.contenders}
    for turn in range(repeats):
        for name, pair in run_round(piece, turn).items():
            runs[name].append(pair)
    return [timing(piece.name, rows, name, pairs) for name, pairs in runs.items()]


def timing(piece: str, rows: int, name: str, pairs: list[tuple[float, float]]) -> Timing:
    cpu, wall = [p[0] for p in pairs], [p[1] for p in pairs]
    return Timing(piece, rows, name, statistics.median(cpu), statistics.median(wall), cpu, wall)


# --- imports ---------------------------------------------------------------------------------------------

IMPORT_ONLY = "import pyarrow as pa, numpy as np"
READ = IMPORT_ONLY + "; import pyarrow.parquet as pq"
# (piece, contender): a snippet run by a fresh interpreter; a piece's first contender is the product's way
IMPORT_SNIPPETS = {
    ("import: convert", "product arrays.from_numpy"): IMPORT_ONLY
    + "; from compaction_assets.segments.arrays import from_numpy; from_numpy(np.arange(10))",
    ("import: convert", "pyarrow pa.array"): IMPORT_ONLY + "; pa.array(np.arange(10))",
    ("import: convert", "(pyarrow and numpy imported only)"): IMPORT_ONLY,
    ("import: read", "product pq.ParquetFile(...).read()"): READ + "; pq.ParquetFile(PATH).read()",
    ("import: read", "pyarrow pq.read_table"): READ + "; pq.read_table(PATH)",
}


def child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def imports_timings(repeats: int) -> list[Timing]:
    """CPU seconds of a fresh interpreter running each snippet (a file of 1,000 rows for the reads),
    rounds interleaved; each snippet's import of pandas checked first."""
    import pyarrow.parquet as pq

    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "part.parquet")
        pq.write_table(pa.table({"offset": from_numpy(np.arange(1000, dtype=np.int64))}), path)
        snippets = {name: code.replace("PATH", repr(path)) for name, code in IMPORT_SNIPPETS.items()}
        for (piece, name), code in snippets.items():
            check = subprocess.run(
                [sys.executable, "-c", code + "; import sys; print('pandas' in sys.modules)"],
                capture_output=True,
                text=True,
                check=True,
            )
            print(f"  {piece}, {name}: imports pandas: {check.stdout.strip()}", flush=True)
        runs: dict[tuple[str, str], list[tuple[float, float]]] = {name: [] for name in snippets}
        names = list(snippets)
        for turn in range(max(5, repeats)):
            for i in range(len(names)):
                name = names[(turn + i) % len(names)]
                cpu, wall = child_cpu(), time.perf_counter()
                subprocess.run([sys.executable, "-c", snippets[name]], check=True)
                runs[name].append((child_cpu() - cpu, time.perf_counter() - wall))
    return [timing(piece, 0, name, pairs) for (piece, name), pairs in runs.items()]


# --- report ----------------------------------------------------------------------------------------------


def print_table(timings: list[Timing]) -> None:
    """A row a contender: its median CPU and wall seconds, and its CPU over the product's (the first
    contender of its piece and size; > 1: the product costs less)."""
    print(f"{'piece':<15} {'rows':>10}  {'contender':<42} {'CPU s':>8} {'wall s':>8} {'CPU/product':>12}")
    product: dict[tuple[str, int], float] = {}
    for t in timings:
        reference = product.setdefault((t.piece, t.rows), t.cpu_seconds)
        ratio = t.cpu_seconds / reference if reference else float("nan")
        cells = f"{t.cpu_seconds:>8.3f} {t.wall_seconds:>8.3f} {ratio:>11.2f}x"
        print(f"{t.piece:<15} {t.rows:>10,}  {t.contender:<42} {cells}")


def versions() -> dict[str, str]:
    found = {"python": sys.version.split()[0], "numpy": np.__version__, "pyarrow": pa.__version__}
    for name, module in (("duckdb", duckdb), ("polars", pl), ("datafusion", datafusion)):
        found[name] = getattr(module, "__version__", "?") if module is not None else "not installed"
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[5_000_000, 20_000_000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batches", type=int, default=10, help="batches of keys asked of one key set")
    parser.add_argument("--pieces", nargs="+", choices=PIECES, default=list(PIECES))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", help="write the timings here as JSON")
    args = parser.parse_args()
    print(f"versions: {versions()}; cores: {os.cpu_count()}; load: {os.getloadavg()}", flush=True)
    warm = make_columns(WARM_UP_ROWS, args.seed)
    for piece in build_pieces(args.pieces, warm, args.batches):
        run_round(piece, 0)  # imports and first calls, checked, not counted
    del warm
    timings: list[Timing] = []
    for rows in args.rows:
        columns = make_columns(rows, args.seed)
        print(f"{rows:,} rows, {columns.key_count:,} keys, {len(columns.files)} files", flush=True)
        for piece in build_pieces(args.pieces, columns, args.batches):
            timings += measure(piece, rows, args.repeats)
            print_table([t for t in timings if t.piece == piece.name and t.rows == rows])
        del columns
    if "imports" in args.pieces:
        timings += imports_timings(args.repeats)
    print(f"load: {os.getloadavg()}")
    print_table(timings)
    if args.json:
        with open(args.json, "w") as out:
            meta = {"date": datetime.date.today().isoformat(), "versions": versions(), "cores": os.cpu_count()}
            json.dump({**meta, "args": vars(args), "timings": [asdict(t) for t in timings]}, out, indent=1)


if __name__ == "__main__":
    main()

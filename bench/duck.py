"""E: B's deduplication in DuckDB on one node. `python -m bench.duck SPEC.json` (SPEC: files, out,
threads); prints one JSON line {seconds, rows, duckdb_version, read_chars, write_chars, peak_rss}.
Run by bench/contenders.py."""

from __future__ import annotations

import json
import sys
import time


def main() -> None:
    import duckdb

    spec = json.load(open(sys.argv[1]))
    con = duckdb.connect()
    con.execute(f"SET threads = {int(spec['threads'])}")
    files = "[" + ", ".join("'" + p.replace("'", "''") + "'" for p in spec["files"]) + "]"
    out = spec["out"].replace("'", "''")
    from bench.metrics import self_io

    io0 = self_io()
    t = time.perf_counter()
    con.execute(f"""COPY (SELECT * FROM read_parquet({files})
                     QUALIFY row_number() OVER (PARTITION BY key ORDER BY "offset" DESC) = 1)
                    TO '{out}' (FORMAT PARQUET)""")
    seconds = time.perf_counter() - t
    io = self_io()  # the query's own reads and writes (not the count below, nor Python's start)
    io["read_chars"] -= io0["read_chars"]
    io["write_chars"] -= io0["write_chars"]
    io["cpu"] -= io0["cpu"]
    rows = con.execute(f"SELECT count(*) FROM read_parquet('{out}')").fetchone()[0]
    print(json.dumps({"seconds": seconds, "rows": rows, "duckdb_version": duckdb.__version__, **io}))


if __name__ == "__main__":
    main()

"""Where Aiven's CSV ingestion spends its CPU, stage by stage, in one thread (no read-ahead), over the files
`python -m bench.landing --layouts aiven-csv --work DIR` wrote:

    python -m bench.csv_stages [--landing /tmp/csvbench/aiven-csv/landing]

Prints CPU seconds of reading the bytes, pyarrow's CSV read (csv_columns.parse_csv), the column-wise shaping
(csv_columns.aiven_csv: base64 and integer cells) and the log's append (validation, Parquet write, commit).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--landing", default="/tmp/csvbench/aiven-csv/landing")
    args = ap.parse_args()
    import pandas  # noqa: F401  imported before any timing, as bench.landing does

    from compaction_assets.ingest.connectors import ingest as connector_ingest
    from compaction_assets.ingest.connectors.shaping import csv_columns
    from compaction_assets.store.log_store import LogStore
    from compaction_assets.topics.config import build_config

    config = build_config({"landing.format": "aiven"})
    handle = LogStore(tempfile.mkdtemp(prefix="csv-stages-"), gc_grace_s=0).log("users-0")
    spent = dict.fromkeys(("read", "parse_csv", "aiven_csv", "append"), 0.0)
    for path in sorted(Path(args.landing).glob("*.csv")):
        started = time.process_time()
        data = path.read_bytes()
        spent["read"] += time.process_time() - started
        started = time.process_time()
        cells = csv_columns.parse_csv(data)
        spent["parse_csv"] += time.process_time() - started
        started = time.process_time()
        cols = csv_columns.aiven_csv(cells, str(path))
        spent["aiven_csv"] += time.process_time() - started
        assert cols is not None, f"{path}: not read column-wise"
        started = time.process_time()
        batch = connector_ingest.encode(cols, path.name, [str(path)])
        connector_ingest.append_batch(handle, config, batch, False)
        spent["append"] += time.process_time() - started
    print(
        "  ".join(f"{stage} {seconds:.2f}" for stage, seconds in spent.items()),
        f" total {sum(spent.values()):.2f} CPU s",
    )


if __name__ == "__main__":
    main()

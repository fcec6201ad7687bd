"""Many native files against one (issue 59: 20 files of 1M records at >= 1.5 x one file's rate), measured in
one process, ingestions alternating so that the machine's load drifts alike over both:

    python -m bench.landing --records 1000000 --files 1 --layouts native-jsonl,native-avro --work /tmp/mf1
    python -m bench.landing --records 1000000 --files 20 --layouts native-jsonl,native-avro --work /tmp/mf20
    python -m bench.landing_files --format jsonl --rounds 3 [--json FILE]            # 1 file, then 20
    python -m bench.landing_files --format jsonl --rounds 4 --reads [--json FILE]    # 20 files: 1 read ahead, then 2

(the first two write the files, and time them once). Each ingestion goes into a fresh store; prints and
writes wall seconds, CPU seconds of the process (every thread) and the 1-minute load average before it,
per mode, with the medians and the records per second and per CPU second.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

RECORDS = 1_000_000


def _ingest(landing: str) -> tuple[float, float, float]:
    from compaction_assets.ingest.landing import ingest, landing_logs
    from compaction_assets.store.log_store import LogStore
    from compaction_assets.topics.config import build_config

    handle = LogStore(tempfile.mkdtemp(prefix="landing-files-"), gc_grace_s=0).log("users-0")
    load = os.getloadavg()[0]
    cpu, wall = time.process_time(), time.perf_counter()
    report = ingest(handle, build_config({}), landing_logs(landing)[0]["users-0"])
    assert report.records_appended == RECORDS, report
    return round(time.perf_counter() - wall, 2), round(time.process_time() - cpu, 2), round(load, 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--format", default="jsonl", choices=["jsonl", "avro"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reads", action="store_true", help="20 files read one ahead against two at a time")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    import pandas  # noqa: F401  imported before any timing, as bench.landing does

    from compaction_assets.ingest.formats import native_reads

    modes = ["1 read ahead", "2 reads at once"] if args.reads else ["1 file", "20 files"]
    runs: dict[str, list] = {mode: [] for mode in modes}
    for _ in range(args.rounds):
        for mode in modes:
            files = 1 if mode == "1 file" else 20
            if args.reads:
                native_reads.read_files.__defaults__ = (1 if mode == "1 read ahead" else 2,)
            runs[mode].append(_ingest(f"/tmp/mf{files}/native-{args.format}/landing"))
    summary = {}
    for mode, results in runs.items():
        wall, cpu = statistics.median(r[0] for r in results), statistics.median(r[1] for r in results)
        summary[mode] = {"median_wall_s": wall, "median_cpu_s": cpu, "records_per_s": round(RECORDS / wall)}
        summary[mode]["records_per_cpu_s"] = round(RECORDS / cpu)
        print(f"{mode:16s} runs (wall s, cpu s, load) {results}  median {wall} s wall, {cpu} s cpu")
    first, second = modes
    ratio = round(summary[first]["median_wall_s"] / summary[second]["median_wall_s"], 2)
    print(f"rate of {second} / {first}: {ratio} x")
    if args.json:
        out = {"format": args.format, "runs (wall s, cpu s, load)": runs, "summary": summary, "rate_ratio": ratio}
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()

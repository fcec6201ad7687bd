"""What `compaction append` pays now that it commits its topic's table (docs/table.md, Freshness), and what
`compaction logs` pays for the lag columns:
`python -m bench.append_table --base /tmp/fresh-base --records 1000 1000000 --rounds 5 --fleet 50 5`.

For each log size: a seeded log (bench/gen.py, about 10 records a key, 100-byte values), copied into one
store per variant; the table of the committing variant's store is committed once first (steady state: each
append then commits its own change). Each round appends the same small file (10 records) with each
variant, each in a process of its own, in turn (interleaved, so the machine's load falls on all alike):

- `before`: the code before this change (`--base`, a checkout of it: no table commit);
- `after`: this code (the append, then the table's commit of its change);
- `after, COMPACTION_TABLES=0`: this code, opted out.

With `--fleet LOGS TOPICS`: a store of LOGS small logs over TOPICS topics, every table committed, and
`compaction logs` timed the same way (the lag reads each topic's current snapshot once).

Prints one JSON object: per size (and `logs`) and variant, the median and every round's wall and CPU seconds (the
child's user + system time, all its threads).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

from bench import gen
from bench.children import ChildRun, Rounds, timed
from compaction_assets.store.log_store import LogStore
from compaction_assets.table.commit.commit import LogCommit, commit_log, commit_logs

ROOT = Path(__file__).resolve().parents[1]
LOG = "bench-0"
VALUE_BYTES = 100


def _stores(work: Path, records: int) -> dict[str, Path]:
    """One store per variant holding the same seeded log; the committing variant's table committed once."""
    seed_store = work / f"seed-{records}"
    handle = LogStore(str(seed_store)).log(LOG, must_exist=False)
    cfg = gen.topic_config(64 << 20)
    gen.generate(handle, cfg, records, max(1, records // 10), VALUE_BYTES, seed=1)
    stores = {}
    for variant in ("before", "after", "after, COMPACTION_TABLES=0"):
        stores[variant] = work / f"{records}-{len(stores)}"
        shutil.copytree(seed_store, stores[variant])
    commit_log(LogStore(str(stores["after"])).log(LOG), cfg)
    return stores


def _fleet(work: Path, logs: int, topics: int) -> Path:
    """A store of `logs` logs of 100 records over `topics` topics, each topic's table committed."""
    store = LogStore(str(work / "fleet"))
    cfg = gen.topic_config(64 << 20)
    by_topic: dict[str, list[LogCommit]] = {}
    for n in range(logs):
        topic = f"t{n % topics}"
        handle = store.log(f"{topic}-{n // topics}", must_exist=False)
        gen.generate(handle, cfg, 100, 10, VALUE_BYTES, seed=n)
        by_topic.setdefault(topic, []).append(LogCommit(handle, cfg))
    for group in by_topic.values():
        commit_logs(group)
    return work / "fleet"


def _interleaved(argv_of, code: dict[str, str], rounds: int, cwd: str) -> dict[str, dict]:
    """Each variant's command (`argv_of(variant)`) run in turn, `rounds` times."""
    runs: dict[str, list[ChildRun]] = {variant: [] for variant in code}
    for _ in range(rounds):
        for variant in code:
            env = {**os.environ, "PYTHONPATH": code[variant], "COMPACTION_TABLES": "0" if "=0" in variant else "1"}
            runs[variant].append(timed(argv_of(variant), env, cwd))
    return {variant: asdict(Rounds.of(r)) for variant, r in runs.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--base", required=True, help="a checkout of the code before the change")
    p.add_argument("--records", type=int, nargs="*", default=[1000, 1_000_000])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--fleet", type=int, nargs=2, metavar=("LOGS", "TOPICS"), help="also time `logs` on such a store")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="append-table-"))
    small = work / "small.jsonl"
    small.write_text(
        "".join(json.dumps({"key": f"key-{i:010d}", "value": "x", "timestamp": 1}) + "\n" for i in range(10))
    )
    code = {"before": args.base, "after": str(ROOT), "after, COMPACTION_TABLES=0": str(ROOT)}
    python = [sys.executable, "-m", "compaction_assets"]
    out: dict[str, dict] = {}
    try:
        for records in args.records:
            stores = _stores(work, records)
            out[str(records)] = _interleaved(
                lambda variant, s=stores: [*python, "--store", str(s[variant]), "append", LOG, str(small)],
                code,
                args.rounds,
                str(work),
            )
        if args.fleet:
            fleet = _fleet(work, *args.fleet)
            out[f"logs: {args.fleet[0]} logs, {args.fleet[1]} topics"] = _interleaved(
                lambda _variant: [*python, "--store", str(fleet), "logs"], code, args.rounds, str(work)
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()

"""The path of one cleaning through the code: which modules of compaction_assets a `compaction clean`
of a small log crosses (docs/architecture.md, "The path of one cleaning").

    PYTHONPATH=. .venv/bin/python -m bench.clean_path [--records 2000] [--strategy offset] [--json FILE]

Builds a small log (a few segments, updates and tombstones), then runs the CLI's `clean --force
--no-table` (with `--table`: its table commit too) in this process under a profiler (sys.setprofile,
every thread) that notes each call from one module of the
product into another: a stop is such a crossing (caller module -> callee module), counted once per
pair. Prints the modules, the stops in the order first taken, the pairs of packages crossed in both
directions (a layer calling back into the one above it) and the pairs of modules crossed in both
directions (a module asked back by one it called). Run it at two commits to compare their paths.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading

PACKAGE = "compaction_assets."


def _short(module: str) -> str:
    return module[len(PACKAGE) :] if module.startswith(PACKAGE) else module


class Crossings:
    """Calls from one module of the product into another, in the order first seen."""

    def __init__(self) -> None:
        self.stops: dict[tuple[str, str], int] = {}
        self.lock = threading.Lock()

    def profile(self, frame, event, arg):
        if event != "call":
            return
        callee = frame.f_globals.get("__name__", "")
        if not callee.startswith(PACKAGE):
            return
        caller = frame.f_back
        while caller is not None and not caller.f_globals.get("__name__", "").startswith(PACKAGE):
            caller = caller.f_back
        if caller is None:
            return
        source = caller.f_globals["__name__"]
        if source != callee:
            with self.lock:
                pair = (_short(source), _short(callee))
                self.stops[pair] = self.stops.get(pair, 0) + 1


def _package(module: str) -> str:
    """The package a module belongs to (`cleaning.decide` -> `cleaning`; a root module is its own)."""
    return module.split(".")[0]


def _back_and_forth(stops: list[tuple[str, str]], unit=_package) -> list[str]:
    """The pairs of packages (or with `unit` another grouping, such as the modules themselves) that a
    cleaning's calls cross in both directions (a layer calling back up, a module asked back by its callee)."""
    crossed = {(unit(a), unit(b)) for a, b in stops if unit(a) != unit(b)}
    return sorted(f"{a} <-> {b}" for a, b in crossed if (b, a) in crossed and a < b)


def _build(root: str, records: int, strategy: str) -> None:
    """A small log `t-0` through the CLI (config apply, append, roll): updates and a few tombstones."""
    import os

    from compaction_assets import cli

    topics = os.path.join(root, "topics.yaml")
    with open(topics, "w") as f:
        f.write(
            f"defaults: {{segment.bytes: 4096, delete.retention.ms: 1, compaction.strategy: {strategy}}}\n"
            "topics: {t: {}}\n"
        )
    lines = os.path.join(root, "records.jsonl")
    with open(lines, "w") as f:
        for i in range(records):
            value = None if i % 17 == 0 else f"v{i}"
            f.write(json.dumps({"key": f"k{i % 50}", "value": value, "timestamp": 1000 + i}) + "\n")
    store = os.path.join(root, "store")
    for argv in (["config", "apply", topics], ["append", "t-0", lines], ["roll", "t-0"]):
        assert cli.main(["--store", store] + argv) == 0, argv


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=2000)
    ap.add_argument("--strategy", default="offset")
    ap.add_argument("--json")
    ap.add_argument("--table", action="store_true", help="the table commit after the cleaning too (`clean` does it)")
    args = ap.parse_args()
    from compaction_assets import cli

    root = tempfile.mkdtemp(prefix="clean-path-")
    _build(root, args.records, args.strategy)
    store = root + "/store"
    crossings = Crossings()
    threading.setprofile(crossings.profile)
    sys.setprofile(crossings.profile)
    try:
        rc = cli.main(["--store", store, "clean", "t-0", "--force", *([] if args.table else ["--no-table"])])
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    stops = list(crossings.stops)
    modules = sorted({m for pair in stops for m in pair})
    back_and_forth = _back_and_forth(stops)
    modules_both_ways = _back_and_forth(stops, unit=str)
    out = {
        "rc": rc,
        "stops": len(stops),
        "modules": len(modules),
        "module_names": modules,
        "path": [f"{a} -> {b}" for a, b in stops],
        "calls": sum(crossings.stops.values()),
        "calls_by_stop": {f"{a} -> {b}": count for (a, b), count in crossings.stops.items()},
        "back_and_forth": back_and_forth,
        "modules_both_ways": modules_both_ways,
    }
    print(
        f"{len(stops)} stops in {len(modules)} modules ({out['calls']} crossing calls); packages crossed both "
        f"ways: {back_and_forth}; modules crossed both ways: {modules_both_ways}",
        file=sys.stderr,
    )
    for a, b in stops:
        print(f"  {a} -> {b}", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()

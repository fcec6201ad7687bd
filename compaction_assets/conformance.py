"""Conformance runner (../shared/conformance/FORMAT.md): every case through the real store, planner and
Spark job, one Spark session for all. One JSON line per case on stdout; everything else on stderr.

`--checks` also runs the four asset checks after every `clean` step, through the function the Dagster
checks call (`checks.verify.verify_cleaning`), and adds their verdicts to the case's line as
`"checks": [{"step", "name", "passed", "description"}, ...]`."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import uuid
from typing import cast

if __name__ == "__main__":
    # the conformance checker's default runner is `python -m compaction_assets.conformance` with the
    # checker's own python: from a bare one, the project's environment runs the cases
    from compaction_assets import run_in_project_environment

    run_in_project_environment("compaction_assets.conformance")

from compaction_assets import settings
from compaction_assets.checks.verify import verify_versions
from compaction_assets.cleaning import engine
from compaction_assets.cleaning.engine import StepReport
from compaction_assets.cleaning.tuning import DEFAULT_TUNING, CleanerTuning
from compaction_assets.errors import CompactionError
from compaction_assets.log import writer
from compaction_assets.log.reader import segment_records
from compaction_assets.planning.planner import evaluate
from compaction_assets.state.latest_state import fits_in_process, latest_state_df, latest_state_table
from compaction_assets.store.fs import Storage
from compaction_assets.store.log_store import LogStore, wall_ms
from compaction_assets.store.manifest import Segment
from compaction_assets.store.names import sanitize_topic
from compaction_assets.topics.config import TopicConfig, build_config
from compaction_assets.topics.config_store import ConfigStore

STAT_KEYS = ("records_read", "records_written", "tombstones_stamped", "tombstones_removed")


def _text(b: bytes | None) -> str | None:
    return None if b is None else b.decode("utf-8", errors="replace")


class CaseRun:
    """One conformance case run through the engine (`tuning`: the cleaner's thresholds, the defaults but in tests)."""

    def __init__(self, case: dict, spark, root: str, *, checks: bool = False, tuning: CleanerTuning = DEFAULT_TUNING):
        self.case = case
        self.tuning = tuning
        self.run_checks = checks
        self.checks: list[dict] = []
        self.spark = spark
        self.name = str(case.get("name", "case"))
        self.store = LogStore(root, gc_grace_s=0)
        self.handle = self.store.log(f"{sanitize_topic(self.name)}-0")
        self.config: TopicConfig | None = None  # the case's, once stored
        self.steps: list[dict] = []
        self.given_headers: dict[int, list] = {}

    def run(self) -> dict:
        error = None
        try:
            topic = sanitize_topic(self.name)
            build_config(self.case.get("config") or {}, topic)  # an invalid case config: one line, nothing stored
            # The case's configuration is stored with its store and read back from it, as every process does.
            configs = ConfigStore(self.store.storage)
            configs.set_topic(topic, self.case.get("config") or {}, f"conformance case {self.name!r}", wall_ms())
            self.config = config = configs.config_for(topic)
            for i, step in enumerate(self.case.get("steps") or []):
                self.step(i, step, config)
        except CompactionError as exc:
            error = str(exc)
        result = {
            "name": self.name,
            "error": error,
            "steps": self.steps,
            "log": self.log_json(),
            "latest_state": self.latest_state(),
        }
        if self.run_checks:
            result["checks"] = self.checks
        return result

    def step(self, i: int, step: dict, config: TopicConfig) -> None:
        if not isinstance(step, dict) or len(step) - ("now" in step and "append" in step) != 1:
            raise CompactionError(f"step {i}: malformed step {step!r}")
        action = next(k for k in step if k != "now" or "append" not in step)
        arg = step[action]
        if action == "append":
            records = [self.record(r) for r in arg]
            result = writer.append(self.handle, config, records, now=step.get("now"), source=f"step {i}")
            if result.records:
                offsets = [r for r in self._offsets(records, result)]
                for off, rec in zip(offsets, arg):
                    self.given_headers[off] = rec.get("headers") or []
        elif action == "roll":
            writer.roll(self.handle)
        elif action == "set_log_start":
            writer.set_log_start(self.handle, int(arg["offset"]))
        elif action == "set_checkpoint":
            writer.set_checkpoint(self.handle, int(arg["offset"]))
        elif action == "plan":
            m = self.handle.manifest()
            ev = evaluate(m, config, int(arg["now"]))
            self.steps.append(self.entry(i, "plan", ev, ev.reason_for(False), False, m.checkpoint, None))
        elif action == "clean":
            rep = engine.run(
                self.handle,
                config,
                int(arg["now"]),
                spark=self.spark,
                force=bool(arg.get("force", False)),
                tuning=self.tuning,
            )
            stats = None
            if rep.cleaned and rep.stats is not None:  # a cleaning's report has its totals
                totals = rep.stats.as_dict()
                stats = {k: totals[k] for k in STAT_KEYS}
                stats.update({k: v for k, v in totals.items() if k not in stats})
            self.steps.append(self.entry(i, "clean", rep.evaluation, rep.reason, rep.cleaned, rep.checkpoint, stats))
            if self.run_checks:
                self.check(i, rep, int(arg["now"]), config)
        else:
            raise CompactionError(f"step {i}: unknown action {action!r}")

    def check(self, i: int, rep: StepReport, now: int, config: TopicConfig) -> None:
        """The four checks on this step's cleaning, as the Dagster checks run them."""
        for outcome in verify_versions(self.handle, config, rep.before_version, rep.after_version, now, rep.cleaned):
            self.checks.append(
                {"step": i, "name": outcome.name, "passed": outcome.passed, "description": outcome.description}
            )

    @staticmethod
    def _offsets(records: list[dict], result) -> list[int]:
        out, nxt = [], result.first_offset
        for rec in records:
            off = rec.get("offset")
            off = nxt if off is None else off
            out.append(off)
            nxt = off + 1
        return out

    @staticmethod
    def record(r: dict) -> dict:
        out = {
            "key": r.get("key"),
            "value": r.get("value"),
            "timestamp": r.get("timestamp"),
            "headers": [list(h) for h in (r.get("headers") or [])],
        }
        if "offset" in r:
            out["offset"] = r["offset"]
        return out

    @staticmethod
    def entry(i, action, evaluation, reason, cleaned, checkpoint, stats) -> dict:
        return {
            "step": i,
            "action": action,
            "eligible": evaluation.eligible,
            "reason": reason,
            "first_dirty_offset": evaluation.first_dirty_offset,
            "first_uncleanable_offset": evaluation.first_uncleanable_offset,
            "dirty_ratio": evaluation.dirty_ratio,
            "max_compaction_delay_ms": evaluation.max_compaction_delay_ms,
            "cleaned": cleaned,
            "checkpoint": checkpoint,
            "stats": stats,
        }

    def log_json(self) -> dict | None:
        try:
            m = self.handle.manifest()
            segments = []
            for idx, (entry, records) in enumerate(segment_records(self.handle, m)):
                seg = cast(Segment, entry)  # segment_records pairs each segment of `m` with its records
                segments.append(
                    {
                        "base_offset": seg.base_offset,
                        "next_offset": seg.next_offset,
                        "active": idx == len(m.segments) - 1,
                        "records": [
                            {
                                "offset": r.offset,
                                "key": _text(r.key),
                                "value": _text(r.value),
                                "timestamp": r.timestamp,
                                "headers": self.headers_json(r),
                                "delete_horizon": r.delete_horizon,
                            }
                            for r in records
                        ],
                    }
                )
            return {
                "log_start_offset": m.log_start_offset,
                "log_end_offset": m.log_end_offset,
                "checkpoint": m.checkpoint,
                "segments": segments,
            }
        except Exception as exc:  # report, do not crash the runner
            print(f"[{self.name}] cannot render the log: {exc}", file=sys.stderr)
            return None

    def headers_json(self, r) -> list:
        given = self.given_headers.get(r.offset)
        if given is not None and len(given) == len(r.headers):
            return [list(h) for h in given]
        return [[n, _text(v)] for n, v in r.headers]

    def latest_state(self) -> dict | None:
        if self.config is None or not self.handle.exists():
            return {}
        try:
            m = self.handle.manifest()
            if fits_in_process(m):  # as the CLI and the asset do: a small log's state needs no Spark
                rows = latest_state_table(self.handle, self.config, m).select(["key", "value"]).to_pylist()
            else:
                rows = latest_state_df(self.spark, self.handle, self.config, m).select("key", "value").collect()
            return {_text(r["key"]): _text(r["value"]) for r in rows}
        except Exception as exc:
            print(f"[{self.name}] cannot compute the latest state: {exc}", file=sys.stderr)
            return None


def parse_args(argv: list[str]) -> tuple[str | None, list[str]]:
    """`[--store URI] CASE...` into (store URI or None, case paths)."""
    store, paths = None, []
    i = 0
    while i < len(argv):
        if argv[i] == "--store":
            if i + 1 >= len(argv):
                raise ValueError("--store needs a URI (a local folder, s3://bucket/prefix, gs://..., az://...)")
            store = argv[i + 1]
            i += 2
            continue
        if argv[i].startswith("--store="):
            store = argv[i].split("=", 1)[1]
        else:
            paths.append(argv[i])
        i += 1
    return store, paths


def main(argv: list[str] | None = None) -> int:
    """Run conformance cases and print one JSON line per case (FORMAT.md)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    checks = "--checks" in argv
    try:
        store, paths = parse_args([a for a in argv if a != "--checks"])
    except ValueError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    if not paths:
        print(
            "usage: python -m compaction_assets.conformance [--checks] [--store URI] CASE.json [CASE.json ...]",
            file=sys.stderr,
        )
        return 2
    # Each run gets its own fresh prefix of the store (a temporary folder by default); removed at the end.
    if store is None:
        tmp = tempfile.mkdtemp(prefix="conformance-")
        storage = None
    else:
        try:
            storage = Storage.open(store)
            tmp = storage.join(f"conformance-{uuid.uuid4().hex[:12]}")
            storage.list_dir(tmp)  # reach the store now: a wrong key or a missing bucket stops the run here
        except CompactionError as exc:
            print(str(exc), file=sys.stderr)
            return 2
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # anything else printed to stdout (Spark, py4j) goes to stderr
    from compaction_assets.spark import get_spark, spark_conf_from_env

    spark = get_spark(
        spark_conf_from_env(
            {"spark.sql.shuffle.partitions": "2", "spark.master": settings.current().spark_master or "local[2]"}
        )
    )
    try:
        for n, path in enumerate(paths):
            try:
                with open(path, encoding="utf-8") as fh:
                    case = json.load(fh)
            except (OSError, ValueError) as exc:
                print(f"cannot read case {path}: {exc}", file=sys.stderr)
                return 2
            root = os.path.join(tmp, f"case-{n}") if storage is None else storage.uri(f"{tmp}/case-{n}")
            result = CaseRun(case, spark, root, checks=checks).run()
            out.write(json.dumps(result) + "\n")
            out.flush()
    finally:
        if storage is None:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            try:
                storage.delete(tmp)
            except CompactionError as exc:
                print(f"could not remove {storage.uri(tmp)}: {exc}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

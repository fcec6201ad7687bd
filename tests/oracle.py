"""A brute-force reference model of /work/shared/SPEC.md, for property tests.

Written from the SPEC alone (not from the engine): a plain-Python replay of one conformance case
(/work/shared/conformance/FORMAT.md) that returns the same result shape as the engine's runner
(`compaction_assets.conformance.CaseRun.run()`): name, error, steps, log, latest_state.

Everything is kept as simple lists of dicts and recomputed from scratch whenever needed; performance is
irrelevant (cases hold a few dozen records).

Readings chosen where the SPEC leaves room:
- records below log_start_offset are physically dropped from the segment that straddles it ("gone for
  every purpose"); an active segment whose records are all gone counts as empty (roll rules, `roll`,
  deadline roll); the last segment is never deleted by a log-start move, even when it lies wholly below
  (a move to LEO leaves the active segment [base, LEO) with no visible record, base < log start).
- the first append to a log that never had a record sets log start and checkpoint to its first offset,
  explicit or not (the generator never overwrites the checkpoint before that first append).
- `clean_bytes` is literally every segment whose base < first_dirty, the active one included.
- `delete_horizon` eligibility counts stamped tombstones at offsets in [log_start, first_dirty) (the clean
  section), and "held" is judged as the cleaning would judge it: against the records outside the
  segments wholly below U (the range that cleaning would rewrite).
- the cleaning that stamps a horizon never removes that tombstone, even with delete.retention.ms = 0.
- a remembered delete is one entry per removed tombstone (key, rank, expiry); several may coexist; it is
  dropped by a `clean` evaluation at now >= expiry, before that evaluation's cleaning.
- a forced clean with nothing to rewrite still counts as a cleaning (cleaned, zero counters).
"""

from __future__ import annotations

import copy
import math

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)

DEFAULTS = {
    "cleanup.policy": "compact",
    "min.cleanable.dirty.ratio": 0.5,
    "min.compaction.lag.ms": 0,
    "max.compaction.lag.ms": INT64_MAX,
    "delete.retention.ms": 86_400_000,
    "segment.bytes": 1_073_741_824,
    "segment.ms": 604_800_000,
    "retention.ms": 604_800_000,
    "retention.bytes": -1,
    "compaction.strategy": "offset",
    "compaction.strategy.header": None,
}


class OracleError(Exception):
    """A refusal (invalid configuration or input): ends the case with `error` set."""


def sat(x: int) -> int:
    """Saturate to int64 (SPEC §6: exact arithmetic, saturating at the bounds)."""
    return max(INT64_MIN, min(INT64_MAX, x))


# ---------------------------------------------------------------------------------------------------
# configuration (SPEC §2)
# ---------------------------------------------------------------------------------------------------


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def parse_config(raw: dict, topic: str) -> dict:
    def bad(key, rule):
        return OracleError(f"invalid configuration for topic {topic!r}: {key}={v.get(key)!r}: {rule}")

    for k in raw:
        if k not in DEFAULTS:
            v = raw
            raise bad(k, "unknown key")
    v = {**DEFAULTS, **raw}
    pol = v["cleanup.policy"]
    if not isinstance(pol, str):
        raise bad("cleanup.policy", "must be a comma-separated list")
    parts = [p.strip() for p in pol.split(",")]
    if parts == [""] or any(p not in ("compact", "delete") for p in parts) or len(set(parts)) != len(parts):
        raise bad("cleanup.policy", "must list compact and/or delete, no duplicates, not empty")
    r = v["min.cleanable.dirty.ratio"]
    if isinstance(r, bool) or not isinstance(r, (int, float)) or math.isnan(r) or not 0 <= r <= 1:
        raise bad("min.cleanable.dirty.ratio", "must be a number in [0, 1]")
    ints = [
        ("min.compaction.lag.ms", 0),
        ("max.compaction.lag.ms", 1),
        ("delete.retention.ms", 0),
        ("segment.bytes", 1),
        ("segment.ms", 1),
        ("retention.ms", -1),
        ("retention.bytes", -1),
    ]
    for key, lo in ints:
        x = v[key]
        if not _is_int(x) or x < lo or x > INT64_MAX:
            raise bad(key, f"must be an integer >= {lo}")
        if key == "min.compaction.lag.ms" and _is_int(v["max.compaction.lag.ms"]) and x > v["max.compaction.lag.ms"]:
            raise bad(key, "must be <= max.compaction.lag.ms")
    if v["compaction.strategy"] not in ("offset", "timestamp", "header"):
        raise bad("compaction.strategy", "must be offset, timestamp or header")
    if v["compaction.strategy"] == "header":
        h = v["compaction.strategy.header"]
        if not isinstance(h, str) or not h.strip():
            raise bad("compaction.strategy.header", "required and non-blank when the strategy is header")
    return v


# ---------------------------------------------------------------------------------------------------
# records
# ---------------------------------------------------------------------------------------------------


def header_bytes(value) -> bytes | None:
    """FORMAT.md: a JSON integer is its 8-byte big-endian signed encoding; a string its UTF-8."""
    if value is None:
        return None
    if _is_int(value):
        return value.to_bytes(8, "big", signed=True)
    return str(value).encode("utf-8")


def size(rec: dict) -> int:
    """SPEC §4 logical size."""
    n = 16 + len(rec["key"].encode()) + len((rec["value"] or "").encode())
    for name, hv in rec["headers"]:
        n += len(name.encode()) + len(header_bytes(hv) or b"")
    return n


def seg_size(seg: dict) -> int:
    return sum(size(r) for r in seg["records"])


class Log:
    def __init__(self, cfg: dict):
        self.cfg = cfg
        # one segment: base, next, records (visible only); the last one is the active segment
        self.segments = [{"base": 0, "next": 0, "records": []}]
        self.log_start = 0
        self.leo = 0
        self.checkpoint = 0
        self.remembered: list[dict] = []  # {"key", "rank", "expiry"}
        self.events: dict = {}  # how often each rule fired (for the tests' coverage report)

    def note(self, event: str, n: int = 1) -> None:
        self.events[event] = self.events.get(event, 0) + n

    # --- configuration helpers ---
    @property
    def strategy(self) -> str:
        return self.cfg["compaction.strategy"]

    @property
    def policy(self) -> set:
        return {p.strip() for p in self.cfg["cleanup.policy"].split(",")}

    def roll_interval(self) -> int:
        if "compact" in self.policy:
            return min(self.cfg["segment.ms"], self.cfg["max.compaction.lag.ms"])
        return self.cfg["segment.ms"]

    def rank(self, rec: dict) -> tuple:
        """Higher rank wins (SPEC §6 winner per key); offsets are unique, so this is a total order."""
        if self.strategy == "offset":
            return (rec["offset"],)
        if self.strategy == "timestamp":
            return (rec["timestamp"], rec["offset"])
        version = None
        for name, hv in rec["headers"]:
            if name == self.cfg["compaction.strategy.header"]:
                version = hv  # the LAST header of that name counts
        b = header_bytes(version)
        if b is None or len(b) != 8:
            return (0, 0, rec["offset"])  # no version
        return (1, int.from_bytes(b, "big", signed=True), rec["offset"])

    def all_records(self, segs=None) -> list:
        return [r for s in (self.segments if segs is None else segs) for r in s["records"]]

    @property
    def active(self) -> dict:
        return self.segments[-1]

    def seal_active(self) -> None:
        """Seal the active segment at LEO; a new empty active segment starts there."""
        self.active["next"] = self.leo
        self.segments.append({"base": self.leo, "next": self.leo, "records": []})

    # --- §1 appends ---
    def append(self, records: list, now, source: str) -> None:
        prepared = []
        nxt = self.leo
        for r in records:
            off = r.get("offset")
            if off is None:
                off = nxt
            elif off < nxt:
                raise OracleError(f"{source}: offset {off} is below {nxt}")
            if r.get("key") is None:
                raise OracleError(f"{source}: record at offset {off} has a null key")
            ts = r.get("timestamp")
            if ts is None:
                ts = now
            if ts is None:
                raise OracleError(f"{source}: record at offset {off} has no timestamp")
            if ts < 0:
                raise OracleError(f"{source}: record at offset {off} has a negative timestamp")
            prepared.append(
                {
                    "offset": off,
                    "key": r["key"],
                    "value": r.get("value"),
                    "timestamp": ts,
                    "headers": [list(h) for h in (r.get("headers") or [])],
                    "delete_horizon": None,
                }
            )
            nxt = off + 1
        if not prepared:
            return
        if self.leo == 0:  # first record ever appended: it fixes log start and checkpoint
            first = prepared[0]["offset"]
            self.log_start = self.checkpoint = first
            self.active["base"] = self.active["next"] = first
        for rec in prepared:
            act = self.active
            if act["records"]:
                too_big = seg_size(act) + size(rec) > self.cfg["segment.bytes"]
                too_old = rec["timestamp"] - min(r["timestamp"] for r in act["records"]) > self.roll_interval()
                if too_big or too_old:
                    self.note("roll_by_size" if too_big else "roll_by_time")
                    act["next"] = rec["offset"]  # the sealed segment ends where rec begins
                    self.segments.append({"base": rec["offset"], "next": rec["offset"], "records": []})
            self.active["records"].append(rec)
            self.leo = rec["offset"] + 1
            self.active["next"] = self.leo

    def roll(self) -> None:
        if self.active["records"]:
            self.seal_active()

    def set_log_start(self, n: int) -> None:
        if n > self.leo:
            raise OracleError(f"cannot move the log start to {n}, beyond the log end offset {self.leo}")
        if n <= self.log_start:
            return
        kept = []
        for i, s in enumerate(self.segments):
            last = i == len(self.segments) - 1
            if s["next"] <= n and not last:
                continue
            if s["base"] < n and any(r["offset"] < n for r in s["records"]):
                self.note("log_start_splits_segment")
            s["records"] = [r for r in s["records"] if r["offset"] >= n]
            kept.append(s)
        self.segments = kept
        self.log_start = n

    # --- §3-§5 evaluation ---
    def evaluate(self, now: int, may_clean: bool) -> dict:
        """Evaluate at `now` ON THIS OBJECT (callers pass a copy for a dry run)."""
        act = self.active
        if act["records"] and min(r["timestamp"] for r in act["records"]) < now - self.roll_interval():
            self.seal_active()  # deadline roll
            self.note("deadline_roll")
        cp = self.checkpoint
        fd = cp if self.log_start <= cp <= self.leo else self.log_start
        if fd != cp:
            self.note("checkpoint_reset")
        if may_clean:
            self.checkpoint = fd
            self.remembered = [e for e in self.remembered if now < e["expiry"]]
        nonactive = self.segments[:-1]
        from_fd = [s for s in nonactive if s["next"] > fd]  # from the one containing first_dirty on
        u = self.active["base"]
        lag = self.cfg["min.compaction.lag.ms"]
        if lag > 0:
            for s in from_fd:
                if s["records"] and max(r["timestamp"] for r in s["records"]) > now - lag:
                    u = min(u, s["base"])
                    self.note("min_lag_blocks")
                    break
        if u < fd:
            u = fd
        clean_bytes = sum(seg_size(s) for s in self.segments if s["base"] < fd)
        cleanable_bytes = sum(seg_size(s) for s in self.segments if s["next"] > fd and s["base"] < u) if u > fd else 0
        total = clean_bytes + cleanable_bytes
        ratio = cleanable_bytes / total if total else 0.0
        positive = [r["timestamp"] for s in from_fd for r in s["records"] if r["timestamp"] > 0]
        delay = 0
        if positive:
            threshold = now - self.cfg["max.compaction.lag.ms"]
            e = min(positive)
            if threshold > e:
                delay = sat(threshold - e)
        rewritten = [s for s in nonactive if s["next"] <= u]
        outside = [r for s in self.segments if not any(s is x for x in rewritten) for r in s["records"]]

        def held(t):
            return self.strategy != "offset" and any(
                o["key"] == t["key"] and self.rank(o) < self.rank(t) for o in outside
            )

        horizon_due = any(
            r["value"] is None
            and r["delete_horizon"] is not None
            and r["delete_horizon"] <= now
            and self.log_start <= r["offset"] < fd
            and not held(r)
            for r in self.all_records()
        )
        reason = None
        if "compact" in self.policy and total > 0:
            if ratio > self.cfg["min.cleanable.dirty.ratio"]:
                reason = "dirty_ratio"
            elif delay > 0 and cleanable_bytes > 0:
                reason = "max_compaction_lag"
            elif horizon_due:
                reason = "delete_horizon"
        return {
            "eligible": reason is not None,
            "reason": reason,
            "first_dirty_offset": fd,
            "first_uncleanable_offset": u,
            "dirty_ratio": float(ratio),
            "max_compaction_delay_ms": delay,
            "rewritten": rewritten,
            "outside": outside,
        }

    # --- §6 cleaning ---
    def clean_range(self, now: int, u: int, rewritten: list, outside: list) -> dict:
        dr = self.cfg["delete.retention.ms"]
        inside = self.all_records(rewritten)
        best: dict = {}
        for r in inside:
            if r["key"] not in best or self.rank(r) > self.rank(best[r["key"]]):
                best[r["key"]] = r
        keep = set()
        stamped = removed = 0
        for key, w in best.items():
            if any(e["key"] == key and self.rank(w) < e["rank"] for e in self.remembered):
                self.note("lost_to_remembered_delete")
                continue  # loses to a remembered delete
            if w["value"] is not None:
                keep.add(w["offset"])
            elif w["delete_horizon"] is None:
                w["delete_horizon"] = sat(now + dr)
                stamped += 1
                keep.add(w["offset"])
            elif now < w["delete_horizon"]:
                keep.add(w["offset"])
            elif self.strategy != "offset" and any(o["key"] == key and self.rank(o) < self.rank(w) for o in outside):
                keep.add(w["offset"])  # held: a loser lives outside the range
                self.note("tombstone_held")
            else:
                removed += 1
                if self.strategy != "offset":
                    self.note("remembered_delete_added")
                    self.remembered.append({"key": key, "rank": self.rank(w), "expiry": sat(now + dr)})
        for s in rewritten:
            s["records"] = [r for r in s["records"] if r["offset"] in keep]
        written = sum(len(s["records"]) for s in rewritten)
        merged: list = []
        for s in rewritten:
            if merged and seg_size(merged[-1]) + seg_size(s) <= self.cfg["segment.bytes"]:
                merged[-1] = {
                    "base": merged[-1]["base"],
                    "next": s["next"],
                    "records": merged[-1]["records"] + s["records"],
                }
            else:
                merged.append(s)
        self.segments = merged + self.segments[len(rewritten) :]
        self.checkpoint = u
        return {
            "records_read": len(inside),
            "records_written": written,
            "tombstones_stamped": stamped,
            "tombstones_removed": removed,
        }

    def retention(self, now: int) -> None:
        rms, rbytes = self.cfg["retention.ms"], self.cfg["retention.bytes"]
        while len(self.segments) > 1:
            s = self.segments[0]
            q = False
            if rms >= 0 and (not s["records"] or max(r["timestamp"] for r in s["records"]) < now - rms):
                q = True
            if rbytes >= 0 and sum(seg_size(x) for x in self.segments) - seg_size(s) >= rbytes:
                q = True
            if not q:
                break
            self.segments.pop(0)
            self.note("retention_deleted_segment")
            self.log_start = self.segments[0]["base"]

    # --- §7.5 ---
    def latest_state(self) -> dict:
        best: dict = {}
        for r in self.all_records():
            if r["key"] not in best or self.rank(r) > self.rank(best[r["key"]]):
                best[r["key"]] = r
        out = {}
        for key, w in best.items():
            if w["value"] is None:
                continue
            if any(e["key"] == key and self.rank(w) < e["rank"] for e in self.remembered):
                self.note("latest_state_hides_loser")
                continue
            out[key] = w["value"]
        return out

    def to_json(self) -> dict:
        segs = []
        for i, s in enumerate(self.segments):
            segs.append(
                {
                    "base_offset": s["base"],
                    "next_offset": s["next"],
                    "active": i == len(self.segments) - 1,
                    "records": [
                        {
                            "offset": r["offset"],
                            "key": r["key"],
                            "value": r["value"],
                            "timestamp": r["timestamp"],
                            "headers": [list(h) for h in r["headers"]],
                            "delete_horizon": r["delete_horizon"],
                        }
                        for r in s["records"]
                    ],
                }
            )
        return {
            "log_start_offset": self.log_start,
            "log_end_offset": self.leo,
            "checkpoint": self.checkpoint,
            "segments": segs,
        }


# ---------------------------------------------------------------------------------------------------
# running a case
# ---------------------------------------------------------------------------------------------------


def _entry(i, action, ev, reason, cleaned, checkpoint, stats) -> dict:
    return {
        "step": i,
        "action": action,
        "eligible": ev["eligible"],
        "reason": reason,
        "first_dirty_offset": ev["first_dirty_offset"],
        "first_uncleanable_offset": ev["first_uncleanable_offset"],
        "dirty_ratio": ev["dirty_ratio"],
        "max_compaction_delay_ms": ev["max_compaction_delay_ms"],
        "cleaned": cleaned,
        "checkpoint": checkpoint,
        "stats": stats,
    }


def run_case(case: dict, events: dict | None = None) -> dict:
    """Replay a case; `events`, when given, receives how often each rule fired."""
    name = str(case.get("name", "case"))
    steps: list = []
    log = None
    error = None
    try:
        cfg = parse_config(case.get("config") or {}, name)
        log = Log(cfg)
        for i, step in enumerate(case.get("steps") or []):
            if "append" in step:
                log.append(step["append"], step.get("now"), f"step {i}")
            elif "roll" in step:
                log.roll()
            elif "set_log_start" in step:
                log.set_log_start(int(step["set_log_start"]["offset"]))
            elif "set_checkpoint" in step:
                log.checkpoint = int(step["set_checkpoint"]["offset"])
            elif "plan" in step:
                ev = copy.deepcopy(log).evaluate(int(step["plan"]["now"]), may_clean=False)
                steps.append(_entry(i, "plan", ev, ev["reason"], False, log.checkpoint, None))
            elif "clean" in step:
                now = int(step["clean"]["now"])
                force = bool(step["clean"].get("force", False))
                ev = log.evaluate(now, may_clean=True)
                reason, cleaned, stats = ev["reason"], False, None
                if "compact" in log.policy and (ev["eligible"] or force):
                    reason = ev["reason"] or "forced"
                    stats = log.clean_range(now, ev["first_uncleanable_offset"], ev["rewritten"], ev["outside"])
                    cleaned = True
                if "delete" in log.policy:
                    log.retention(now)
                steps.append(_entry(i, "clean", ev, reason, cleaned, log.checkpoint, stats))
            else:
                raise OracleError(f"step {i}: unknown action {step!r}")
    except OracleError as exc:
        error = str(exc)
    if log is None:
        log = Log(dict(DEFAULTS))
    state = log.latest_state()
    if events is not None:
        for k, n in log.events.items():
            events[k] = events.get(k, 0) + n
        for st in steps:
            events[f"reason={st['reason']}"] = events.get(f"reason={st['reason']}", 0) + 1
            for k, n in (st["stats"] or {}).items():
                if k in ("tombstones_stamped", "tombstones_removed") and n:
                    events[k] = events.get(k, 0) + n
        if error:
            events["error"] = events.get("error", 0) + 1
    return {"name": name, "error": error, "steps": steps, "log": log.to_json(), "latest_state": state}

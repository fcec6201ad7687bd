"""Property tests: random small logs through the real engine and through an independent brute-force replay
of SPEC.md (tests/oracle.py); the full results must be equal for every strategy.

Each case is generated from its own seed (printed on failure, with the case JSON). Replay one case with
    RANDOM_LOGS_CASE=<strategy>:<seed>:<max cleans> \
        .venv/bin/python -m pytest tests/cleaning/test_random_logs.py -k single
change the whole sample with RANDOM_LOGS_SEED=<int> (default: a fixed seed, so runs are reproducible) and
its size with RANDOM_LOGS_CASES=<n> (default 25 per strategy; the `slow` variant runs 200 per strategy).

The generator (checked by test_generator_exercises_the_rules) mixes random steps with "delete episodes"
(fresh tombstones, stale writes of deleted keys, cleanings timed around delete.retention.ms) so that
horizons, held tombstones and remembered deletes actually happen.

Every clean step also runs the four asset checks (`--checks` of the conformance runner); a failing
check is a difference (the cleaning matches the oracle, so the check would be wrong, or both are).

What is compared, per case: `error` (both null or both set; messages are free text), every step entry
(eligible, reason, first_dirty_offset, first_uncleanable_offset, dirty_ratio within 1e-9,
max_compaction_delay_ms, cleaned, checkpoint, and the four SPEC §8 counters of `stats`), the whole log
(log_start_offset, log_end_offset, checkpoint, every segment's base/next/active and every record with its
delete_horizon) and latest_state.
"""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import random
import traceback
from dataclasses import replace

import pytest

from compaction_assets.cleaning.tuning import DEFAULT_TUNING, CleanerTuning
from compaction_assets.conformance import CaseRun
from tests.oracle import INT64_MAX, INT64_MIN
from tests.oracle import run_case as oracle_run
from tests.tunings import mark_only

STRATEGIES = ("offset", "timestamp", "header")
STAT_KEYS = ("records_read", "records_written", "tombstones_stamped", "tombstones_removed")
# The repository's copy of the public cases (tests/conformance/), so the tests pass from a clone alone.
CONFORMANCE = os.environ.get("CONFORMANCE_DIR", os.path.join(os.path.dirname(os.path.dirname(__file__)), "conformance"))
BASE_SEED = int(os.environ.get("RANDOM_LOGS_SEED", "20250611"))
FAST_CASES = int(os.environ.get("RANDOM_LOGS_CASES", "25"))  # per strategy
FAST_MAX_CLEANS = 2
SLOW_CASES = 200  # per strategy
SLOW_MAX_CLEANS = 5
MAX_RECORDS = 60


# ---------------------------------------------------------------------------------------------------
# case generation
# ---------------------------------------------------------------------------------------------------


def _config(rng: random.Random, strategy: str, delete_focus: bool) -> dict:
    cfg: dict = {"compaction.strategy": strategy}
    if strategy == "header":
        cfg["compaction.strategy.header"] = rng.choice(["v", "v", "ver"])
    elif rng.random() < 0.1:
        cfg["compaction.strategy.header"] = "v"  # valid but ignored
    cfg["min.cleanable.dirty.ratio"] = rng.choice(
        [0, 0.0, 0.1, 0.25, 0.5, 0.5, 0.75, 0.9, 1, 1.0, round(rng.random(), 3)]
    )
    r = rng.random()
    if r < 0.75:
        cfg["segment.bytes"] = rng.randint(40, 200)
    elif r < 0.85:
        cfg["segment.bytes"] = rng.randint(10, 39)  # records may exceed a whole segment
    if rng.random() < 0.5:
        cfg["segment.ms"] = rng.choice([rng.randint(50, 400), rng.randint(400, 3000)])
    max_lag = None
    if rng.random() < 0.45:
        max_lag = rng.choice([rng.randint(1, 300), rng.randint(300, 4000)])
        cfg["max.compaction.lag.ms"] = max_lag
    r = rng.random()
    if r < 0.4:
        lag = rng.choice([rng.randint(1, 200), rng.randint(200, 1500)])
        cfg["min.compaction.lag.ms"] = min(lag, max_lag) if max_lag is not None else lag
    elif r < 0.55:
        cfg["min.compaction.lag.ms"] = 0
    r = rng.random()
    if delete_focus:  # horizons and remembered deletes that expire within the case, mostly
        cfg["delete.retention.ms"] = (
            0 if r < 0.1 else rng.randint(1, 300) if r < 0.55 else rng.randint(300, 2000) if r < 0.95 else INT64_MAX
        )
    elif r < 0.25:
        cfg["delete.retention.ms"] = 0
    elif r < 0.85:
        cfg["delete.retention.ms"] = rng.choice([rng.randint(1, 300), rng.randint(300, 3000)])
    elif r < 0.92:
        cfg["delete.retention.ms"] = INT64_MAX  # the horizon saturates
    if rng.random() < 0.3:
        cfg["cleanup.policy"] = rng.choice(["compact,delete", "delete,compact", " compact , delete"])
        cfg["retention.ms"] = rng.choice([-1, rng.randint(100, 1500), rng.randint(1500, 6000)])
        cfg["retention.bytes"] = rng.choice([-1, -1, rng.randint(60, 400)])
    elif rng.random() < 0.15:
        cfg["cleanup.policy"] = "compact"
        cfg["retention.ms"] = rng.randint(0, 100)  # valid but unused without delete
    return cfg


def _headers(rng: random.Random, strategy: str, name: str, version: int) -> list | None:
    """Headers of one record; for the header strategy, `version` is the one to use when it has one."""
    if strategy != "header":
        r = rng.random()
        if r < 0.7:
            return None
        return [[rng.choice(["h", "hé"]), rng.choice([1, "x", None, "abcdefgh", "€"])]]
    choices = [
        lambda: [[name, version]],
        lambda: [[name, version]],
        lambda: [[name, version]],
        lambda: [[name, version]],
        lambda: [[name, rng.randint(-2, 6)]],
        lambda: [[name, rng.choice([INT64_MAX, INT64_MIN, INT64_MAX - 1, INT64_MIN + 1, 2**32, -(2**32)])]],
        lambda: [[name, rng.choice(["ÿÿÿÿ", "\u20ac\u20acab", "\x7f\x7f\x7f\x7f\x7f\x7f\x7f\x7f"])]],  # 8 UTF-8 bytes
        lambda: [],  # missing
        lambda: None,  # no headers at all
        lambda: [[name, None]],  # null value
        lambda: [[name, rng.choice(["abc", "abcdefghi", ""])]],  # not 8 bytes
        lambda: [[name, rng.choice(["abcdefgh", "\x00\x00\x00\x00\x00\x00\x00\x03"])]],  # exactly 8 bytes
        lambda: [[name, rng.randint(-2, 6)], [name, rng.randint(-2, 6)]],  # the last one counts
        lambda: [[name, rng.randint(0, 6)], ["x", 1], [name, "bad"]],  # last is not 8 bytes
        lambda: [[name.upper(), rng.randint(0, 6)]],  # names are case-sensitive
        lambda: [["other", rng.randint(0, 6)], [name, rng.randint(-2, 6)]],
    ]
    return rng.choice(choices)()


class _Gen:
    def __init__(self, rng: random.Random, strategy: str, cfg: dict):
        self.rng, self.strategy, self.cfg = rng, strategy, cfg
        self.keys = [f"k{i}" for i in range(rng.randint(3, 6))]
        if rng.random() < 0.2:
            self.keys[-1] = "kä€"  # sizes count UTF-8 bytes, not characters
        self.leo = 0
        self.records = 0
        # times near 0 mostly; sometimes a realistic epoch, sometimes near the int64 end (saturation)
        epoch = rng.choices([0, 1_700_000_000_000, INT64_MAX - 1_000_000], [90, 7, 3])[0]
        self.now = epoch + rng.choice([0, 100, 1000, rng.randint(0, 2000)])
        self.vseq = 0
        self.latest_ts: dict = {}  # per key: highest timestamp so far
        self.latest_version: dict = {}  # per key: highest version so far (header strategy)
        self.deleted: set = set()  # keys that got a tombstone
        self.tombstone_rate = 0.12 if strategy == "offset" else 0.18

    def tick(self, big: bool = False, small: bool = False) -> int:
        r = self.rng.random()
        dr = self.cfg.get("delete.retention.ms", 86_400_000)
        if big and dr <= 5000:  # around the delete retention: before and after horizons and expiries
            step = self.rng.choice([0, dr // 3, dr // 2, dr, dr + 1, 2 * dr + 1, self.rng.randint(1, 300)])
        elif small:
            step = self.rng.randint(0, 20)
        elif r < 0.2:
            step = 0
        elif r < 0.7:
            step = self.rng.randint(1, 150)
        elif r < 0.95:
            step = self.rng.randint(150, 1500)
        else:
            step = self.rng.randint(1500, 8000)
        self.now = min(self.now + step, INT64_MAX)
        return self.now

    def record(
        self,
        explicit: bool,
        key: str | None = None,
        stale: bool | None = None,
        tombstone_rate: float | None = None,
        fresh_tombstones: bool = False,
    ) -> dict:
        rng = self.rng
        self.vseq += 1
        key = key or rng.choice(self.keys)
        rate = self.tombstone_rate if tombstone_rate is None else tombstone_rate
        rec: dict = {
            "key": key,
            "value": None
            if rng.random() < rate
            else f"v{self.vseq}" + rng.choice(["x", "x", "x", "é"]) * rng.randint(0, 6),
        }
        if rec["value"] is None:
            self.deleted.add(key)
        # a stale write (older timestamp / lower version than the key's latest) now and then, so that
        # the timestamp and header strategies meet late losers, held tombstones and remembered deletes
        if stale is None:
            stale = rng.random() < 0.25
        stale = stale and key in self.latest_ts
        fresh = fresh_tombstones and rec["value"] is None
        r = rng.random()
        if fresh:  # a delete that wins: newest timestamp and version of its key
            stale = False
            rec["timestamp"] = min(max(self.latest_ts.get(key, 0), self.now) + rng.randint(0, 20), INT64_MAX)
        elif stale:
            rec["timestamp"] = max(0, self.latest_ts[key] - rng.randint(0, 300))
        elif r < 0.06:
            rec["timestamp"] = 0
        elif r < 0.13:
            pass  # takes the step's `now`
        else:
            rec["timestamp"] = min(max(0, self.now + rng.randint(-400, 40)), INT64_MAX)
        ts = rec.get("timestamp", self.now)
        self.latest_ts[key] = max(ts, self.latest_ts.get(key, ts))
        top = self.latest_version.get(key)
        if top is None:
            version = rng.randint(-2, 6)
        elif fresh:
            version = top + rng.randint(1, 3)
        elif stale:
            version = top - rng.randint(0, 3)
        else:
            version = top + rng.randint(0, 3)
        self.latest_version[key] = version if top is None else max(top, version)
        h = _headers(rng, self.strategy, self.cfg.get("compaction.strategy.header", "v"), version)
        if self.strategy == "header" and (fresh or (stale and rng.random() < 0.7)):
            h = [[self.cfg["compaction.strategy.header"], version]] if fresh or rng.random() < 0.8 else []
        if h is not None:
            rec["headers"] = h
        if explicit and rng.random() < 0.8:
            off = self.leo + rng.choice([0, 0, 1, 2, 5])
            if self.leo == 0 and rng.random() < 0.5:
                off = rng.randint(1, 40)  # data exported from Kafka: starts late
            rec["offset"] = off
            self.leo = off + 1
        else:
            self.leo += 1
        self.records += 1
        return rec

    def append(self, n: int | None = None, small_tick: bool = False, **kw) -> dict:
        now = self.tick(small=small_tick)
        explicit = self.rng.random() < 0.15 or (self.leo == 0 and self.rng.random() < 0.25)
        n = min(n or self.rng.randint(1, 5), MAX_RECORDS - self.records)
        recs = [self.record(explicit, **kw) for _ in range(max(n, 1))]
        step: dict = {"append": recs}
        if any("timestamp" not in r for r in recs):
            step["now"] = now
        return step

    def clean(self, big_tick: bool = False) -> dict:
        step: dict = {"now": self.tick(big_tick)}
        if self.rng.random() < 0.25:
            step["force"] = True
        elif self.rng.random() < 0.1:
            step["force"] = False
        return {"clean": step}

    def random_step(self, out: list, budget: dict) -> None:
        rng = self.rng
        r = rng.random()
        if r < 0.42 and self.records < MAX_RECORDS:
            out.append(self.append())
        elif r < 0.5:
            out.append({"roll": {}})
        elif r < 0.64:
            out.append({"plan": {"now": self.tick()}})
        elif r < 0.88:
            if budget["cleans"] > 0:
                budget["cleans"] -= 1
                out.append(self.clean())
        elif r < 0.94:
            if rng.random() < 0.03:
                target = self.leo + 1  # refused: beyond LEO (ends the case)
            else:
                target = rng.randint(0, self.leo) if self.leo else 0
            out.append({"set_log_start": {"offset": target}})
        elif self.leo > 0:  # not on a log that never had a record
            out.append({"set_checkpoint": {"offset": rng.randint(0, self.leo + 3)}})

    def delete_episode(self, out: list, rounds: int) -> None:
        """A delete's life, with random variations: tombstones get cleaned (stamped); stale writes of the
        deleted keys arrive, sealed or still in the active segment (held tombstones); time passes beyond
        the horizon (removal, remembered delete); more stale writes arrive and are cleaned before or after
        the remembered delete expires, or stay uncleaned (latest state)."""
        rng = self.rng
        dr = self.cfg.get("delete.retention.ms", 86_400_000)
        short = dr <= 5000

        def clean(after: int) -> None:
            self.now = min(self.now + after, INT64_MAX)
            step: dict = {"now": self.now}
            if rng.random() < 0.5:
                step["force"] = True
            out.append({"clean": step})

        def stale_writes(n: int) -> None:
            if self.records >= MAX_RECORDS:
                return
            key = rng.choice(sorted(self.deleted)) if self.deleted else None
            out.append(self.append(n=n, key=key, stale=rng.random() < 0.85, tombstone_rate=0.1, small_tick=True))

        out.append(self.append(tombstone_rate=0.5, fresh_tombstones=True))
        if rng.random() < 0.8:
            out.append({"roll": {}})
        clean(rng.randint(0, 50))  # stamps the horizons
        for _ in range(rounds):
            r = rng.random()
            if r < 0.7:
                stale_writes(rng.randint(1, 2))
            elif r < 0.85:
                out.append(self.append(small_tick=True))
            if rng.random() < 0.5:
                out.append({"roll": {}})
            if rng.random() < 0.3:
                out.append({"plan": {"now": min(self.now + rng.randint(0, 30), INT64_MAX)}})
            if short:
                clean(
                    rng.choice([0, dr // 4, dr // 3, dr // 2, dr - 1, dr, dr + 1, 2 * dr + 1])
                    if dr > 1
                    else rng.randint(0, 3)
                )
            else:
                clean(rng.randint(0, 500))
        if rng.random() < 0.6 and self.deleted and self.records < MAX_RECORDS:
            # late writes of deleted keys, left uncleaned: the latest state must still hide those that
            # lose to a remembered delete
            keys = sorted(self.deleted)[:3]
            out.append({"append": [self.record(False, key=k, stale=True, tombstone_rate=0.0) for k in keys]})

    def steps(self, max_cleans: int, episode: bool) -> list:
        rng = self.rng
        out: list = []
        budget = {"cleans": max_cleans}
        if episode:  # a shorter random prefix, then a delete's life, then a few random steps
            for _ in range(rng.randint(1, 6)):
                self.random_step(out, budget)
            self.delete_episode(out, rng.randint(2, max(2, max_cleans - 1)))
            for _ in range(rng.randint(0, 3)):
                self.random_step(out, budget)
        else:
            n_steps = rng.randint(6, 22)
            while len(out) < n_steps:
                self.random_step(out, budget)
        # end with evaluations, so that the final state has been cleaned at least once
        if rng.random() < 0.7:
            out.append({"plan": {"now": self.tick()}})
            out.append({"clean": {"now": self.now, "force": rng.random() < 0.3}})
        return out


def make_case(strategy: str, seed: int, max_cleans: int = 4) -> dict:
    """A random case, a pure function of its arguments. `max_cleans` bounds the random `clean` steps and
    the rounds of a delete episode (each cleaning is a Spark job); a closing plan/clean pair may follow."""
    rng = random.Random(seed)
    episode = rng.random() < (0.5 if strategy != "offset" else 0.3)
    cfg = _config(rng, strategy, delete_focus=episode)
    gen = _Gen(rng, strategy, cfg)
    return {"name": f"random-{strategy}-{seed}", "config": cfg, "steps": gen.steps(max_cleans, episode)}


def case_seeds(strategy: str, count: int, salt: int = 0) -> list[int]:
    rng = random.Random(f"{BASE_SEED}:{strategy}:{salt}")
    return [rng.randrange(2**31) for _ in range(count)]


# ---------------------------------------------------------------------------------------------------
# targeted cases: small hand-written logs around the resurrection guard and the delete horizon (each one
# is compared with the oracle like a random case; they reproduce findings of the random search)
# ---------------------------------------------------------------------------------------------------

TARGETED_CASES = [
    {
        "name": "remembered-delete-expiry",
        "config": {"compaction.strategy": "timestamp", "delete.retention.ms": 0, "min.cleanable.dirty.ratio": 0},
        "steps": [
            {"append": [{"key": "a", "value": None, "timestamp": 100}]},
            {"roll": {}},
            {"clean": {"now": 200}},
            {"clean": {"now": 300}},
            {"clean": {"now": 400}},
        ],
    },
    {
        "name": "tombstone-index-lost-to-gc",
        "config": {"compaction.strategy": "timestamp"},
        "steps": [
            {"append": [{"key": "a", "value": None, "timestamp": 100}]},
            {"roll": {}},
            {"clean": {"now": 200}},
            {"clean": {"now": 250}},
            {"append": [{"key": "a", "value": "late", "timestamp": 50}]},
        ],
    },
    {
        "name": "remembered-delete-hit",
        "config": {"compaction.strategy": "timestamp", "delete.retention.ms": 1000, "min.cleanable.dirty.ratio": 0},
        "steps": [
            {"append": [{"key": "a", "value": None, "timestamp": 100}, {"key": "b", "value": "1", "timestamp": 100}]},
            {"roll": {}},
            {"clean": {"now": 200}},
            {"clean": {"now": 1300}},
            {"append": [{"key": "a", "value": "late", "timestamp": 50}]},
            {"plan": {"now": 1350}},
            {"roll": {}},
            {"clean": {"now": 1400}},
        ],
    },
    {
        "name": "hold-single-batch",
        "config": {"compaction.strategy": "timestamp", "delete.retention.ms": 100},
        "steps": [
            {
                "append": [
                    {"key": "a", "value": None, "timestamp": 1000},
                    {"key": "b", "value": None, "timestamp": 1000},
                ]
            },
            {"roll": {}},
            {"clean": {"now": 1100}},
            {
                "append": [
                    {"key": "a", "value": "old", "timestamp": 500},
                    {"key": "a", "value": "old2", "timestamp": 600},
                ]
            },
            {"plan": {"now": 1300}},
            {"clean": {"now": 1300}},
        ],
    },
    {
        "name": "hold-double-count",
        "config": {"compaction.strategy": "timestamp", "delete.retention.ms": 100},
        "steps": [
            {
                "append": [
                    {"key": "a", "value": None, "timestamp": 1000},
                    {"key": "b", "value": None, "timestamp": 1000},
                ]
            },
            {"roll": {}},
            {"clean": {"now": 1100}},
            {"append": [{"key": "a", "value": "old", "timestamp": 500}]},
            {"append": [{"key": "a", "value": "old2", "timestamp": 600}]},
            {"plan": {"now": 1300}},
            {"clean": {"now": 1300}},
        ],
    },
    {
        "name": "hold-for-a-tombstone-below-log-start",
        "config": {"compaction.strategy": "timestamp", "delete.retention.ms": 100},
        "steps": [
            {
                "append": [
                    {"key": "x", "value": "1", "timestamp": 1000},
                    {"key": "a", "value": None, "timestamp": 1000},
                    {"key": "b", "value": None, "timestamp": 1000},
                ]
            },
            {"roll": {}},
            {"clean": {"now": 1100}},
            {"set_log_start": {"offset": 2}},
            {"append": [{"key": "a", "value": "late", "timestamp": 500}]},
            {"plan": {"now": 1300}},
            {"clean": {"now": 1300}},
        ],
    },
    {
        "name": "header-remembered-delete-hides-late-value",
        "config": {
            "compaction.strategy": "header",
            "compaction.strategy.header": "v",
            "delete.retention.ms": 1000,
            "min.cleanable.dirty.ratio": 0,
        },
        "steps": [
            {
                "append": [
                    {"key": "a", "value": None, "timestamp": 100, "headers": [["v", 5]]},
                    {"key": "b", "value": "1", "timestamp": 100, "headers": [["v", 1]]},
                ]
            },
            {"roll": {}},
            {"clean": {"now": 200}},
            {"clean": {"now": 1300}},
            {"append": [{"key": "a", "value": "late", "timestamp": 900, "headers": [["v", 3]]}]},
            {"plan": {"now": 1350}},
        ],
    },
    {
        "name": "header-held-tombstone",
        "config": {"compaction.strategy": "header", "compaction.strategy.header": "v", "delete.retention.ms": 100},
        "steps": [
            {
                "append": [
                    {"key": "a", "value": None, "timestamp": 1000, "headers": [["v", 5]]},
                    {"key": "b", "value": None, "timestamp": 1000, "headers": [["v", 1]]},
                ]
            },
            {"roll": {}},
            {"clean": {"now": 1100}},
            {"append": [{"key": "a", "value": "old", "timestamp": 1200, "headers": [["v", 3]]}]},
            {"plan": {"now": 1300}},
            {"clean": {"now": 1300}},
        ],
    },
    {
        "name": "header-ties-and-short-versions",
        "config": {"compaction.strategy": "header", "compaction.strategy.header": "v", "min.cleanable.dirty.ratio": 0},
        "steps": [
            {
                "append": [
                    {"key": "a", "value": "v2-first", "timestamp": 100, "headers": [["v", 2]]},
                    {"key": "a", "value": "v2-second", "timestamp": 50, "headers": [["v", 2]]},
                    {"key": "a", "value": "short", "timestamp": 900, "headers": [["v", "abc"]]},
                    {"key": "b", "value": "no-header", "timestamp": 100},
                    {"key": "b", "value": "null-version", "timestamp": 100, "headers": [["v", None]]},
                    {"key": "c", "value": "last-counts", "timestamp": 100, "headers": [["v", 9], ["v", 1]]},
                    {"key": "c", "value": "v5", "timestamp": 100, "headers": [["v", 5]]},
                    {"key": "d", "value": "V-is-not-v", "timestamp": 100, "headers": [["V", 9]]},
                    {"key": "d", "value": "negative", "timestamp": 100, "headers": [["v", -1]]},
                    {"key": "d", "value": "none", "timestamp": 100},
                ]
            },
            {"roll": {}},
            {"clean": {"now": 1000}},
        ],
    },
    {
        "name": "timestamp-ties-go-to-the-higher-offset",
        "config": {"compaction.strategy": "timestamp", "min.cleanable.dirty.ratio": 0},
        "steps": [
            {
                "append": [
                    {"key": "a", "value": "1", "timestamp": 500},
                    {"key": "a", "value": "2", "timestamp": 500},
                    {"key": "a", "value": "older", "timestamp": 499},
                    {"key": "b", "value": None, "timestamp": 7},
                    {"key": "b", "value": "1", "timestamp": 7},
                ]
            },
            {"roll": {}},
            {"clean": {"now": 1000}},
        ],
    },
    {
        "name": "compact-delete-retention-after-cleaning",
        "config": {
            "cleanup.policy": "compact,delete",
            "retention.ms": 1000,
            "min.cleanable.dirty.ratio": 0,
            "segment.bytes": 60,
        },
        "steps": [
            {
                "append": [
                    {"key": "a", "value": "1", "timestamp": 100},
                    {"key": "a", "value": "2", "timestamp": 200},
                    {"key": "b", "value": "1", "timestamp": 300},
                    {"key": "c", "value": "1", "timestamp": 2500},
                    {"key": "c", "value": "2", "timestamp": 2600},
                ]
            },
            {"roll": {}},
            {"append": [{"key": "d", "value": "1", "timestamp": 2700}]},
            {"clean": {"now": 2800}},
        ],
    },
    {
        "name": "delete-horizon-outside-clean-section",
        "config": {"delete.retention.ms": 0},
        "steps": [
            {"append": [{"key": "b", "value": "1", "timestamp": 100}, {"key": "a", "value": None, "timestamp": 100}]},
            {"roll": {}},
            {"clean": {"now": 200}},
            {"set_checkpoint": {"offset": 1}},
            {"plan": {"now": 300}},
            {"clean": {"now": 300}},
        ],
    },
]


# ---------------------------------------------------------------------------------------------------
# comparison
# ---------------------------------------------------------------------------------------------------


def _normalise(result: dict) -> dict:
    out = json.loads(json.dumps(result))
    for st in out.get("steps") or []:
        if isinstance(st.get("stats"), dict):
            st["stats"] = {k: st["stats"].get(k) for k in STAT_KEYS}
    return out


def _diff(exp, act, path: str, out: list) -> None:
    if isinstance(exp, dict) and isinstance(act, dict):
        for k in sorted(set(exp) | set(act)):
            if k not in act:
                out.append(f"{path}.{k}: oracle {json.dumps(exp[k])}, engine: missing")
            elif k not in exp:
                out.append(f"{path}.{k}: engine has unexpected {json.dumps(act[k])}")
            else:
                _diff(exp[k], act[k], f"{path}.{k}", out)
    elif isinstance(exp, list) and isinstance(act, list):
        if len(exp) != len(act):
            out.append(f"{path}: oracle {len(exp)} items {json.dumps(exp)}, engine {len(act)} {json.dumps(act)}")
            return
        for i, (e, a) in enumerate(zip(exp, act)):
            _diff(e, a, f"{path}[{i}]", out)
    elif isinstance(exp, float) or isinstance(act, float):
        if (
            isinstance(exp, bool)
            or isinstance(act, bool)
            or not isinstance(exp, (int, float))
            or not isinstance(act, (int, float))
            or abs(exp - act) > 1e-9
        ):
            out.append(f"{path}: oracle {exp!r}, engine {act!r}")
    elif type(exp) is not type(act) or exp != act:
        out.append(f"{path}: oracle {json.dumps(exp)}, engine {json.dumps(act)}")


def compare_results(oracle: dict, engine: dict) -> list[str]:
    o, e = _normalise(oracle), _normalise(engine)
    out: list[str] = []
    if (o.get("error") is None) != (e.get("error") is None):
        out.append(f"error: oracle {o.get('error')!r}, engine {e.get('error')!r}")
    o.pop("error", None)
    e.pop("error", None)
    _diff(o, e, "result", out)
    return out


def run_both(
    case: dict, spark, root: str, tuning: CleanerTuning = DEFAULT_TUNING
) -> tuple[dict, dict | None, list[str]]:
    """Run a case through the oracle and the engine; the differences ([] when they agree). An engine
    crash (an exception other than a refusal, which the runner reports as `error`) is a difference too."""
    expected = oracle_run(case)
    try:
        actual = CaseRun(case, spark, root, checks=True, tuning=tuning).run()
    except Exception as exc:
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if "compaction_assets" in f.filename]
        where = [f"  at {os.path.basename(f.filename)}:{f.lineno} in {f.name}: {f.line}" for f in frames[-4:]]
        return expected, None, [f"engine crashed: {type(exc).__name__}: {exc}", *where]
    # the asset checks run after every clean step: on a cleaning that matches the oracle, none may fail
    failed = [
        f"check {c['name']} failed after step {c['step']}: {c['description']}"
        for c in actual.pop("checks")
        if not c["passed"]
    ]
    return expected, actual, compare_results(expected, actual) + failed


def _check_many(
    strategy: str, seeds: list[int], max_cleans: int, spark, tmp_path, tuning: CleanerTuning = DEFAULT_TUNING
) -> None:
    failures = []
    for n, seed in enumerate(seeds):
        case = make_case(strategy, seed, max_cleans)
        _, _, diffs = run_both(case, spark, str(tmp_path / f"case-{n}"), tuning)
        if diffs:
            failures.append((seed, case, diffs))
    if failures:
        lines = [
            f"{len(failures)} of {len(seeds)} random {strategy!r} cases differ from the oracle "
            f"(RANDOM_LOGS_SEED={BASE_SEED}); seeds: {[f[0] for f in failures]}"
        ]
        for seed, case, diffs in failures[:3]:
            lines.append(f"--- RANDOM_LOGS_CASE={strategy}:{seed}:{max_cleans}  ({len(diffs)} difference(s))")
            lines += ["  " + d[:600] for d in diffs[:12]]
            lines.append("  case: " + json.dumps(case))
        pytest.fail("\n".join(lines), pytrace=False)


# ---------------------------------------------------------------------------------------------------
# tests
# ---------------------------------------------------------------------------------------------------


def test_oracle_matches_the_example_cases():
    """The oracle itself passes every example case of the conformance suite (it must, to be trusted)."""
    spec = importlib.util.spec_from_file_location("conformance_check", os.path.join(CONFORMANCE, "check.py"))
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    files = sorted(glob.glob(os.path.join(CONFORMANCE, "cases", "*.json")))
    assert len(files) >= 17, f"example cases not found under {CONFORMANCE}"
    problems = {}
    for f in files:
        with open(f, encoding="utf-8") as fh:
            case = json.load(fh)
        diffs = check.compare(case.get("expect") or {}, oracle_run(case))
        if diffs:
            problems[os.path.basename(f)] = diffs
    assert not problems, problems


RULES = [
    "roll_by_size",
    "roll_by_time",
    "deadline_roll",
    "checkpoint_reset",
    "min_lag_blocks",
    "log_start_splits_segment",
    "retention_deleted_segment",
    "tombstones_stamped",
    "tombstones_removed",
    "reason=dirty_ratio",
    "reason=max_compaction_lag",
    "reason=delete_horizon",
    "reason=forced",
    "reason=None",
]
GUARD_RULES = ["tombstone_held", "remembered_delete_added", "lost_to_remembered_delete", "latest_state_hides_loser"]


def _rules_seen(cases: list[dict]) -> dict:
    """In how many of `cases` each rule fires (oracle only, no Spark)."""
    seen: dict = {}
    for case in cases:
        events: dict = {}
        oracle_run(case, events)
        for k in events:
            seen[k] = seen.get(k, 0) + 1
    return seen


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_rule_fires_in_the_default_run(strategy):
    """The cases this strategy's default run compares with the engine (its random cases, and the targeted
    cases of its strategy) reach every rule worth testing at least once, so that passing means something."""
    cases = [make_case(strategy, seed, FAST_MAX_CLEANS) for seed in case_seeds(strategy, FAST_CASES)]
    cases += [c for c in TARGETED_CASES if c["config"].get("compaction.strategy", "offset") == strategy]
    seen = _rules_seen(cases)
    wanted = RULES + (GUARD_RULES if strategy != "offset" else [])
    missing = [k for k in wanted if not seen.get(k)]
    assert not missing, f"rules the default run never reaches: {missing} (all: {seen})"


@pytest.mark.slow
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_generator_exercises_the_rules(strategy):
    """The slow sample reaches every rule at least three times (in number of cases)."""
    seen = _rules_seen(
        [make_case(strategy, seed, SLOW_MAX_CLEANS) for seed in case_seeds(strategy, SLOW_CASES, salt=1)]
    )
    wanted = RULES + (GUARD_RULES if strategy != "offset" else [])
    missing = {k: seen.get(k, 0) for k in wanted if seen.get(k, 0) < 3}
    assert not missing, f"rules the generator rarely reaches: {missing} (all: {seen})"


@pytest.mark.parametrize("case", TARGETED_CASES, ids=[c["name"] for c in TARGETED_CASES])
def test_targeted_case_matches_oracle(case, spark, tmp_path):
    _, _, diffs = run_both(case, spark, str(tmp_path / "case"))
    assert not diffs, "\n".join(diffs + ["case: " + json.dumps(case)])


# How a cleaning treats segments that lose records: the product's threshold and shortcuts for small
# logs, or every segment kept with its removed offsets in the deletion vector (so that reads through the
# vector are compared record by record) by the paths of large logs: only the keys that newer rows touch
# grouped, the decision not collected but cached in Spark (the offset strategy's: made in the tasks of
# its group-by), the writes in Python workers (the case logs are small: every size limit set below them).
REWRITE_MODES = {
    "threshold": DEFAULT_TUNING,
    "deletion_vector": replace(
        mark_only(),
        collect_decision_max_rows=-1,
        collect_offset_decision_max_rows=-1,
        driver_rewrite_max_rows=-1,
        driver_mark_max_rows=-1,
        local_master_writes_here=False,
        incremental_max_dirty_share=1.0,
        incremental_min_rows=0,
    ),
}


@pytest.mark.parametrize("mode", REWRITE_MODES)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_random_logs_match_oracle(strategy, mode, spark, tmp_path):
    seeds = case_seeds(strategy, FAST_CASES)
    seeds = seeds[: (FAST_CASES + 1) // 2] if mode == "threshold" else seeds[(FAST_CASES + 1) // 2 :]
    _check_many(strategy, seeds, FAST_MAX_CLEANS, spark, tmp_path, REWRITE_MODES[mode])


@pytest.mark.slow
@pytest.mark.parametrize("mode", REWRITE_MODES)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_random_logs_match_oracle_many(strategy, mode, spark, tmp_path):
    _check_many(
        strategy,
        case_seeds(strategy, SLOW_CASES // 2, salt=1 if mode == "threshold" else 2),
        SLOW_MAX_CLEANS,
        spark,
        tmp_path,
        REWRITE_MODES[mode],
    )


@pytest.mark.skipif(
    "RANDOM_LOGS_CASE" not in os.environ,
    reason="set RANDOM_LOGS_CASE=<strategy>:<seed>[:<max cleans>] to replay one case",
)
def test_single_case(spark, tmp_path):
    strategy, seed, *rest = os.environ["RANDOM_LOGS_CASE"].split(":")
    case = make_case(strategy, int(seed), int(rest[0]) if rest else FAST_MAX_CLEANS)
    print(json.dumps(case))
    _, _, diffs = run_both(case, spark, str(tmp_path / "case"))
    assert not diffs, "\n".join(diffs)

"""The timeline of a daemon fleet run, read back from its Dagster instance (issue 33).

    DAGSTER_HOME=WORK/dagster_home .venv/bin/python -m bench.fleet_timeline [--landed UNIX_S] [--json OUT]

`bench.fleet_daemon --workdir WORK` keeps the instance (and writes `landed_unix` in its JSON; without
`--landed`, the first sensor tick that requested runs is time 0). Prints, in seconds after the landing:
each sensor's ticks (when, how long, runs requested), and per run its queue (enqueued, starting, started:
the run worker's process start and code location load), each step's start and end and, inside it, when
its first and last event of each kind was written, how many, and the gaps where nothing was written.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

RUN_EVENTS = ("PIPELINE_ENQUEUED", "PIPELINE_STARTING", "PIPELINE_START", "PIPELINE_SUCCESS", "PIPELINE_FAILURE")
GAP_S = 2.0  # a pause in a step's event writes longer than this is listed


@dataclass
class Tick:
    """One sensor tick: when it started, how long it took, how many runs it requested."""

    sensor: str
    at_s: float
    took_s: float
    runs: int
    status: str


@dataclass
class Kind:
    """The events of one kind a step wrote: how many, the first and last one's time."""

    count: int
    first_s: float
    last_s: float


@dataclass
class Step:
    """One step of a run: its start and end, its events by kind, the pauses between its writes."""

    key: str
    start_s: float | None = None
    end_s: float | None = None
    kinds: dict[str, Kind] = field(default_factory=dict)
    gaps: list[tuple[float, float]] = field(default_factory=list)


@dataclass
class RunTimeline:
    """One run: its job, size, the queue's and the run worker's milestones, its steps."""

    job: str
    logs: int
    milestones: dict[str, float]
    steps: list[Step]


def event_kind(entry) -> str:
    """An event's kind: the Dagster event type, with the asset (or check) it is about; 'log' for a log line."""
    event = entry.dagster_event
    if event is None:
        return "log"
    kind = event.event_type_value
    if event.asset_key is not None:
        kind += f":{event.asset_key.to_user_string()}"
    return kind


def steps_of(entries: list, landed: float) -> list[Step]:
    """The steps of one run's event log, with their kinds and pauses."""
    steps: dict[str, Step] = {}
    last: dict[str, float] = {}
    for entry in entries:
        key = entry.step_key or (entry.dagster_event.step_key if entry.dagster_event else None)
        if key is None:
            continue
        at = entry.timestamp - landed
        step = steps.setdefault(key, Step(key))
        kind = event_kind(entry)
        if kind == "STEP_START":
            step.start_s = round(at, 2)
        elif kind in ("STEP_SUCCESS", "STEP_FAILURE"):
            step.end_s = round(at, 2)
        seen = step.kinds.get(kind)
        step.kinds[kind] = (
            Kind(1, round(at, 2), round(at, 2)) if seen is None else Kind(seen.count + 1, seen.first_s, round(at, 2))
        )
        if key in last and at - last[key] > GAP_S:
            step.gaps.append((round(last[key], 2), round(at, 2)))
        last[key] = at
    return list(steps.values())


def run_timelines(instance, landed: float) -> list[RunTimeline]:
    """Every run of the instance, oldest first."""
    out = []
    for record in sorted(instance.get_run_records(), key=lambda r: r.create_timestamp):
        run = record.dagster_run
        entries = instance.all_logs(run.run_id)
        milestones = {"requested": round(record.create_timestamp.timestamp() - landed, 2)}
        for entry in entries:
            kind = event_kind(entry)
            if kind in RUN_EVENTS:
                milestones[kind.replace("PIPELINE_", "run_").lower()] = round(entry.timestamp - landed, 2)
        out.append(
            RunTimeline(
                run.job_name, int(run.tags.get("compaction/batch_size", 1)), milestones, steps_of(entries, landed)
            )
        )
    return out


def sensor_ticks(instance, landed: float, since_s: float = -30.0) -> list[Tick]:
    """The sensors' ticks from `since_s` seconds before the landing, in time order."""
    ticks = []
    for state in instance.all_instigator_state():
        if state.instigator_type.value != "SENSOR":  # schedules
            continue
        for tick in instance.get_ticks(state.instigator_origin_id, state.selector_id, limit=10_000):
            if tick.timestamp - landed < since_s:
                continue
            took = (tick.end_timestamp - tick.timestamp) if tick.end_timestamp else -1.0
            ticks.append(
                Tick(
                    state.instigator_name,
                    round(tick.timestamp - landed, 2),
                    round(took, 2),
                    len(tick.run_ids),
                    tick.status.value,
                )
            )
    return sorted(ticks, key=lambda t: t.at_s)


def first_requesting_tick(instance) -> float:
    """The start of the first tick that requested runs (the landing's time when none was given)."""
    ticks = sensor_ticks(instance, 0.0, since_s=float("-inf"))
    return min(t.at_s for t in ticks if t.runs)


def print_timeline(ticks: list[Tick], runs: list[RunTimeline]) -> None:
    """The ticks that did something or took long, then each run and its steps."""
    counts = Counter(t.sensor for t in ticks)
    print("sensor ticks (s after the landing):", dict(counts))
    for t in ticks:
        if t.runs or t.took_s > 1.0:
            print(f"  {t.sensor} at {t.at_s} s took {t.took_s} s, {t.runs} run(s), {t.status}")
    for run in runs:
        print(f"{run.job} ({run.logs} logs): {run.milestones}")
        for step in run.steps:
            print(f"  {step.key}: {step.start_s} -> {step.end_s} s")
            for kind, k in sorted(step.kinds.items(), key=lambda item: item[1].first_s):
                print(f"    {kind}: {k.count}, {k.first_s} -> {k.last_s} s")
            if step.gaps:
                print(f"    pauses over {GAP_S} s: {step.gaps[:10]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--landed", type=float, help="the landing's time, Unix seconds (fleet_daemon's JSON)")
    ap.add_argument("--json", help="also write the timeline as JSON to this file")
    args = ap.parse_args()
    import dagster as dg

    with dg.DagsterInstance.get() as instance:
        landed = args.landed if args.landed is not None else first_requesting_tick(instance)
        ticks, runs = sensor_ticks(instance, landed), run_timelines(instance, landed)
    print_timeline(ticks, runs)
    if args.json:
        Path(args.json).write_text(
            json.dumps({"ticks": [asdict(t) for t in ticks], "runs": [asdict(r) for r in runs]}, indent=1)
        )


if __name__ == "__main__":
    main()

"""The store's figures as Prometheus metrics (prometheus_client), for `metrics --format prometheus` and the
`metrics serve` endpoint: Kafka's log-cleaner figures (SPEC §8, cleaning/metrics.py) under
`compaction_log_cleaner_<Kafka's name, '-' as '_'>`, and per log (labels log, topic, partition) its table
lag (table/reading/lag.py) and its landing backlog (ingest/backlog.py). Every scrape reads the store again."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from compaction_assets.cleaning.metrics import FleetFigures, LogState, evaluate_logs, figures
from compaction_assets.cli.context import Context, _progress
from compaction_assets.errors import CompactionError
from compaction_assets.ingest.backlog import LandingBacklog, store_backlog
from compaction_assets.store.names import parse_log_name
from compaction_assets.table.reading.lag import TableLag

PREFIX = "compaction_"
CLEANER = PREFIX + "log_cleaner_"
LOG_LABELS = ["log", "topic", "partition"]


@dataclass(frozen=True)
class StoreReading:
    """What one scrape read: the figures across logs, and each log's table lag and landing backlog."""

    figures: FleetFigures
    logs: tuple[str, ...]
    lags: dict[str, TableLag] = field(default_factory=dict)  # empty when tables are off
    backlog: dict[str, LandingBacklog] = field(default_factory=dict)


def read_store(ctx: Context, now: int) -> StoreReading:
    """The store's figures at `now`: manifests, the topics' current snapshots, the landing area's listing."""
    states = evaluate_logs(ctx.store, ctx.config, now)
    return StoreReading(
        figures(states, now),
        tuple(s.log for s in states),
        _lags(ctx, states, now) if ctx.env.tables.enabled else {},
        store_backlog(ctx.store, str(ctx.landing), now),
    )


def _lags(ctx: Context, states: list[LogState], now: int) -> dict[str, TableLag]:
    """Each readable log's table lag, topic by topic: a topic whose table cannot be read has none (and says
    why on stderr), the others still have theirs."""
    from compaction_assets.table.reading.lag import lags

    by_topic: dict[str, list] = {}
    for s in states:
        if s.manifest is not None:
            by_topic.setdefault(parse_log_name(s.log)[0], []).append((ctx.handle(s.log), ctx.config(s.log), s.manifest))
    out: dict[str, TableLag] = {}
    for topic, logs in by_topic.items():
        try:
            out.update(lags(logs, now))
        except CompactionError as exc:
            _progress(f"metrics: no table lag for topic {topic}: {exc}")
    return out


def _gauge(name: str, help: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, help, value=value)


def _cleaner(f: FleetFigures) -> Iterator[Metric]:
    """Kafka's LogCleaner figures (kafka.log:type=LogCleaner,name=...), by its names."""
    yield _gauge(
        CLEANER + "max_dirty_percent",
        "Kafka's max-dirty-percent: 100 x the highest dirty ratio of a compacted log",
        f.max_dirty_percent,
    )
    yield _gauge(
        CLEANER + "max_clean_time_secs",
        "Kafka's max-clean-time-secs: the longest last cleaning of a log",
        f.max_clean_time_secs,
    )
    yield _gauge(
        CLEANER + "max_compaction_delay_secs",
        "Kafka's max-compaction-delay-secs: the largest max-compaction delay",
        f.max_compaction_delay_secs,
    )
    yield _gauge(
        CLEANER + "uncleanable_partitions_count",
        "Kafka's uncleanable-partitions-count: logs marked uncleanable or unreadable",
        f.uncleanable_partitions_count,
    )
    yield _gauge(
        CLEANER + "uncleanable_bytes",
        "Kafka's uncleanable-bytes: cleanable bytes stuck behind failed cleanings",
        f.uncleanable_bytes,
    )
    yield _gauge(
        CLEANER + "time_since_last_run_ms",
        "Kafka's time-since-last-run-ms: since the end of the last cleaning (-1: never)",
        f.time_since_last_run_ms,
    )


def _per_log(reading: StoreReading, now: int) -> Iterator[Metric]:
    """Each log's table lag and landing backlog (a log without a landing folder has an empty backlog)."""
    families = {
        "lag_records": GaugeMetricFamily(
            PREFIX + "table_lag_records", "records of the log its topic's table does not show yet", labels=LOG_LABELS
        ),
        "lag_seconds": GaugeMetricFamily(
            PREFIX + "table_lag_seconds",
            "since the oldest change of the log its topic's table does not show yet",
            labels=LOG_LABELS,
        ),
        "late": GaugeMetricFamily(
            PREFIX + "table_late", "1 when the table lag passes the topic's table.freshness.ms", labels=LOG_LABELS
        ),
        "files": GaugeMetricFamily(
            PREFIX + "landing_pending_files", "landed files the log has not ingested yet", labels=LOG_LABELS
        ),
        "bytes": GaugeMetricFamily(
            PREFIX + "landing_pending_bytes", "bytes of the landed files not ingested yet", labels=LOG_LABELS
        ),
        "age": GaugeMetricFamily(
            PREFIX + "landing_oldest_pending_age_seconds",
            "how long the oldest pending landed file has waited",
            labels=LOG_LABELS,
        ),
    }
    for log in sorted(set(reading.logs) | set(reading.backlog)):
        topic, partition = parse_log_name(log)
        labels = [log, topic, str(partition)]
        lag = reading.lags.get(log)
        if lag is not None:
            families["lag_records"].add_metric(labels, lag.records)
            families["lag_seconds"].add_metric(labels, lag.milliseconds / 1000)
            families["late"].add_metric(labels, int(lag.late))
        backlog = reading.backlog.get(log) or LandingBacklog(log, (), (), 0, now)
        families["files"].add_metric(labels, len(backlog.pending))
        families["bytes"].add_metric(labels, backlog.pending_bytes)
        families["age"].add_metric(labels, (backlog.oldest_pending_age_ms or 0) / 1000)
    yield from families.values()


class StoreCollector(Collector):
    """The store's metrics, read again at every collection (every scrape of the endpoint)."""

    def __init__(self, read: Callable[[], tuple[StoreReading, int]]):
        self.read = read

    def collect(self) -> Iterator[Metric]:
        try:
            reading, now = self.read()
        except CompactionError as exc:  # the endpoint stays up and says it could not read the store
            _progress(f"metrics: the store cannot be read: {exc}")
            yield _gauge(PREFIX + "up", "1 when this scrape read the store", 0)
            return
        yield _gauge(PREFIX + "up", "1 when this scrape read the store", 1)
        yield _gauge(PREFIX + "logs", "logs in the store", reading.figures.logs)
        yield from _cleaner(reading.figures)
        yield from _per_log(reading, now)


def registry_of(read: Callable[[], tuple[StoreReading, int]]) -> CollectorRegistry:
    """A registry holding only the store's collector (no process or platform metrics of this process)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(read))
    return registry

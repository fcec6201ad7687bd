"""The code location: `dagster dev -w workspace.yaml` loads `defs` from here.

The resources resolve their settings when a run or a tick starts, so the location loads with nothing
set; only the topics file is read at load, so that an invalid one fails the load in one line.
A deployment that wants other schedule times builds its own with `build_definitions(ScheduleSettings(...))`.
"""

import warnings

import dagster as dg

from compaction_assets.defs.alerts import check_failure_alert, run_failure_alert
from compaction_assets.defs.assets import cleanable_range, compacted_log, latest_state, raw_segments
from compaction_assets.defs.automation.schedules import DEFAULT_SCHEDULE_SETTINGS, ScheduleSettings, build_schedules
from compaction_assets.defs.automation.sensors import (
    dirty_ratio_sensor,
    log_discovery_sensor,
    max_compaction_lag_sensor,
)
from compaction_assets.defs.batches.jobs import compaction_batch_job, ingest_batch_job
from compaction_assets.defs.checks import compacted_log_checks, table_matches_latest_state
from compaction_assets.defs.config_job import apply_topics_config_job
from compaction_assets.defs.forget import forget_job
from compaction_assets.defs.jobs import OPERATOR_JOBS, compaction_job, ingest_job, retention_job
from compaction_assets.defs.table.freshness import (
    table_catch_up_job,
    table_freshness,
    table_freshness_job,
    table_freshness_sensor,
)
from compaction_assets.errors import CompactionError
from resources.alerts import AlertWebhookResource
from resources.log_store import LogStoreResource, validate_topics_file
from resources.spark import make_spark_resource

# Dagster 1.13 copies a sensor when it resolves the sensor's jobs, passing owners=[] where none were set,
# and so warns that the `owners` parameter is beta: no sensor here sets owners, and the line (in the demo,
# `dg dev` and the daemon) tells a user nothing.
warnings.filterwarnings(
    "ignore", message="Parameter `owners` of initializer `SensorDefinition.__init__`", category=dg.BetaWarning
)


def build_definitions(schedule_settings: ScheduleSettings = DEFAULT_SCHEDULE_SETTINGS) -> dg.Definitions:
    """The code location's definitions, with the schedules' cron and default status from `schedule_settings`."""
    return dg.Definitions(
        assets=[raw_segments, cleanable_range, compacted_log, latest_state],
        asset_checks=[compacted_log_checks, table_matches_latest_state, table_freshness],
        jobs=[
            ingest_job,
            compaction_job,
            ingest_batch_job,
            compaction_batch_job,
            retention_job,
            apply_topics_config_job,
            table_freshness_job,
            table_catch_up_job,
            *OPERATOR_JOBS,
            forget_job,
        ],
        sensors=[
            log_discovery_sensor,
            dirty_ratio_sensor,
            max_compaction_lag_sensor,
            table_freshness_sensor,
            run_failure_alert,
            check_failure_alert,
        ],
        schedules=build_schedules(schedule_settings),
        resources={
            "pyspark": make_spark_resource(),
            "log_store": LogStoreResource(),
            "alert_webhook": AlertWebhookResource(),
        },
        executor=dg.in_process_executor,
    )


try:
    validate_topics_file()
except CompactionError as exc:
    # One line naming the file, topic and key (or the variable): the engine's frames add nothing.
    raise CompactionError(str(exc)) from None

defs = build_definitions()

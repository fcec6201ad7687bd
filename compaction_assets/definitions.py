"""The code location: `dagster dev -w workspace.yaml` loads `defs` from here.

Nothing here reads the environment: the resources resolve their settings when a run or a tick starts.
A deployment that wants other schedule times builds its own with `build_definitions(ScheduleSettings(...))`.
"""

import dagster as dg

from compaction_assets.defs.alerts import check_failure_alert, run_failure_alert
from compaction_assets.defs.assets import cleanable_range, compacted_log, latest_state, raw_segments
from compaction_assets.defs.jobs import OPERATOR_JOBS, compaction_job, ingest_job, retention_job
from compaction_assets.defs.schedules import ScheduleSettings, build_schedules
from compaction_assets.defs.sensors import dirty_ratio_sensor, log_discovery_sensor, max_compaction_lag_sensor
from resources.alerts import AlertWebhookResource
from resources.log_store import LogStoreResource
from resources.spark import make_spark_resource


def build_definitions(schedule_settings: ScheduleSettings = ScheduleSettings()) -> dg.Definitions:
    """The code location's definitions, with the schedules' cron and default status from `schedule_settings`."""
    return dg.Definitions(
        assets=[raw_segments, cleanable_range, compacted_log, latest_state],
        jobs=[ingest_job, compaction_job, retention_job, *OPERATOR_JOBS],
        sensors=[log_discovery_sensor, dirty_ratio_sensor, max_compaction_lag_sensor, run_failure_alert,
                 check_failure_alert],
        schedules=build_schedules(schedule_settings),
        resources={"pyspark": make_spark_resource(), "log_store": LogStoreResource(),
                   "alert_webhook": AlertWebhookResource()},
        executor=dg.in_process_executor,
    )


defs = build_definitions()

"""The code location: `dagster dev -w workspace.yaml` loads `defs` from here."""

import dagster as dg

from compaction_assets.errors import CompactionError
from compaction_assets.defs.alerts import check_failure_alert, run_failure_alert
from compaction_assets.defs.assets import cleanable_range, compacted_log, latest_state, raw_segments
from compaction_assets.defs.config_job import apply_topics_config_job
from compaction_assets.defs.checks import compacted_log_checks
from compaction_assets.defs.jobs import compaction_job, ingest_job
from compaction_assets.defs.sensors import dirty_ratio_sensor, log_discovery_sensor, max_compaction_lag_sensor
from resources.log_store import LogStoreResource
from resources.spark import make_spark_resource

try:
    log_store = LogStoreResource.from_env()
except CompactionError as exc:
    # One line naming the file, topic and key (or the variable): the engine's frames add nothing.
    raise CompactionError(str(exc)) from None

defs = dg.Definitions(
    assets=[raw_segments, cleanable_range, compacted_log, latest_state],
    asset_checks=[compacted_log_checks],
    jobs=[ingest_job, compaction_job, apply_topics_config_job],
    sensors=[log_discovery_sensor, dirty_ratio_sensor, max_compaction_lag_sensor, run_failure_alert,
             check_failure_alert],
    resources={"pyspark": make_spark_resource(), "log_store": log_store},
    executor=dg.in_process_executor,
)

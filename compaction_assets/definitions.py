"""The code location: `dagster dev -w workspace.yaml` loads `defs` from here."""

import dagster as dg

from resources.log_store import LogStoreResource
from resources.spark import make_spark_resource

from .alerts import check_failure_alert, run_failure_alert
from .assets import cleanable_range, compacted_log, latest_state, raw_segments
from .jobs import compaction_job, ingest_job
from .sensors import dirty_ratio_sensor, log_discovery_sensor, max_compaction_lag_sensor

defs = dg.Definitions(
    assets=[raw_segments, cleanable_range, compacted_log, latest_state],
    jobs=[ingest_job, compaction_job],
    sensors=[log_discovery_sensor, dirty_ratio_sensor, max_compaction_lag_sensor, run_failure_alert,
             check_failure_alert],
    resources={"pyspark": make_spark_resource(), "log_store": LogStoreResource.from_env()},
    executor=dg.in_process_executor,
)

"""One dynamic partition per log (`<topic>-<partition>`), added by the discovery sensor."""

import dagster as dg

log_partitions = dg.DynamicPartitionsDefinition(name="logs")

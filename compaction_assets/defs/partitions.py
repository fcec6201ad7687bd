"""One dynamic partition per log (`<topic>-<partition>`), added by the discovery sensor."""

import dagster as dg

LOG_PARTITIONS = "logs"  # the partitions definition's name, by which the instance stores its partitions
log_partitions = dg.DynamicPartitionsDefinition(name=LOG_PARTITIONS)

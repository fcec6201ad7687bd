"""The Spark resource: lazy (sensors never start a JVM), configured from the environment.

SPARK_MASTER (local[*] by default, spark://..., yarn, k8s://...) or SPARK_REMOTE (sc://... for Spark
Connect). EnvVar is not resolved inside spark_config, hence this factory.
"""

from __future__ import annotations

from dagster_pyspark import LazyPySparkResource

from compaction_assets.spark import spark_conf_from_env


def make_spark_resource(extra: dict | None = None) -> LazyPySparkResource:
    return LazyPySparkResource(spark_config=spark_conf_from_env(extra))

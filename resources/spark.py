"""The Spark resource: lazy (sensors never start a JVM), configured from the environment when the first
step that needs Spark starts, never when the code location loads.

SPARK_MASTER (local[*] by default, spark://..., yarn, k8s://...) or SPARK_REMOTE (sc://... for Spark
Connect), read through `settings` at that moment; `spark_config` adds or overrides settings. (EnvVar is
not resolved inside a dict such as spark_config, hence the environment is read here, at launch.)
"""

from __future__ import annotations

from dagster_pyspark import LazyPySparkResource

from compaction_assets.spark import get_spark, spark_conf_from_env


class SettingsSparkResource(LazyPySparkResource):
    """LazyPySparkResource whose session settings come from the environment when the session starts."""

    # pydantic copies a field's default for each instance; a default_factory would leave Dagster's config
    # schema without the default
    spark_config: dict = {}  # noqa: RUF012

    def _init_session(self) -> None:
        if self._spark_session is None:
            self._spark_session = get_spark(spark_conf_from_env(dict(self.spark_config)))


def make_spark_resource(extra: dict | None = None) -> SettingsSparkResource:
    """The Spark resource, with `extra` Spark settings on top of the environment's."""
    return SettingsSparkResource(spark_config=dict(extra or {}))

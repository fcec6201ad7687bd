"""The Spark session the engine uses when the caller does not bring one."""

from __future__ import annotations

import os
import sys

DEFAULT_CONF = {
    "spark.ui.enabled": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.adaptive.coalescePartitions.enabled": "true",
    "spark.sql.parquet.compression.codec": "snappy",
    "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.ui.showConsoleProgress": "false",
}
LOG4J = os.path.join(os.path.dirname(__file__), "log4j2.properties")


def spark_conf_from_env(extra: dict | None = None) -> dict:
    """Spark settings: SPARK_REMOTE (sc://...) or SPARK_MASTER (local[*], spark://...), plus defaults."""
    conf = dict(DEFAULT_CONF)
    remote = os.environ.get("SPARK_REMOTE")
    if remote:
        # Spark Connect: the server owns the JVM settings; the SQL settings are session settings, which
        # the Connect client applies to its session (same semantics as a local or cluster session).
        conf = {"spark.remote": remote, **{k: v for k, v in DEFAULT_CONF.items() if k.startswith("spark.sql.")}}
    else:
        conf["spark.master"] = os.environ.get("SPARK_MASTER", "local[*]")
        conf["spark.driver.extraJavaOptions"] = f"-Dlog4j.configurationFile=file:{LOG4J}"
        if conf["spark.master"].startswith("local"):
            # A local session serves this machine only: bind the driver to loopback.
            conf["spark.driver.host"] = os.environ.get("SPARK_DRIVER_HOST", "127.0.0.1")
            conf["spark.driver.bindAddress"] = os.environ.get("SPARK_DRIVER_BIND_ADDRESS", "127.0.0.1")
        else:
            # On a cluster, executors connect back to the driver: the address they must use, when the
            # host's default (its hostname) is not it.
            for env, key in (("SPARK_DRIVER_HOST", "spark.driver.host"),
                             ("SPARK_DRIVER_BIND_ADDRESS", "spark.driver.bindAddress")):
                if os.environ.get(env):
                    conf[key] = os.environ[env]
        if os.environ.get("SPARK_DRIVER_MEMORY"):
            conf["spark.driver.memory"] = os.environ["SPARK_DRIVER_MEMORY"]
    conf.update(extra or {})
    _default_worker_python(conf.get("spark.master", ""))
    return conf


def _default_worker_python(master: str) -> None:
    """Python workers (the segment rewrite) on this machine run this interpreter unless told otherwise.
    PySpark reads PYSPARK_PYTHON when the session starts, whoever starts it (this module or Dagster's
    resource), and otherwise runs `python3`, which may lack pyarrow."""
    if master.startswith("local") or "://127.0.0.1:" in master or "://localhost:" in master:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


def get_spark(conf: dict | None = None):
    """Get or create the process's Spark session (the first session's settings win)."""
    from pyspark.sql import SparkSession

    conf = conf or spark_conf_from_env()
    builder = SparkSession.builder.appName("compaction-assets")
    if "spark.remote" in conf:
        builder = builder.remote(conf["spark.remote"])
        conf = {k: v for k, v in conf.items() if k != "spark.remote"}
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    try:
        spark.sparkContext.setLogLevel("ERROR")
    except Exception:  # Spark Connect has no SparkContext
        pass
    return spark

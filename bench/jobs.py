"""Counting the Spark jobs an operation starts (local and cluster sessions; not under Spark Connect).

The driver's status store keeps every job of the application (up to `spark.ui.retainedJobs`), with or
without the web UI, so the jobs an operation started are those whose id is above the highest before it.
Under Spark Connect the client has no SparkContext: the count is then unknown (None).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class JobCount:
    """The Spark jobs started between `start()` and `stop()`, with the call site of each."""

    jobs: int | None = None
    call_sites: list[str] = field(default_factory=list)


def _store(spark):
    from compaction_assets.spark.lazy_session import started_session

    spark = started_session(spark)  # a session not started yet has run no job
    if spark is None:
        return None
    try:
        return spark.sparkContext._jsc.sc().statusStore()
    except Exception:  # Spark Connect: no SparkContext on the client
        return None


def _job_ids(store) -> dict[int, str]:
    jobs = store.jobsList(None)
    out = {}
    it = jobs.iterator()
    while it.hasNext():
        job = it.next()
        out[int(job.jobId())] = str(job.name())
    return out


class JobCounter:
    """Counts the Spark jobs started while it is open: `with JobCounter(spark) as c: ...; c.result.jobs`."""

    def __init__(self, spark) -> None:
        self.spark = spark
        self.result = JobCount()
        self._before: set[int] = set()

    def __enter__(self) -> JobCounter:
        store = _store(self.spark)
        self._before = set(_job_ids(store)) if store is not None else set()
        return self

    def __exit__(self, *exc) -> None:
        from compaction_assets.spark.lazy_session import started_session

        if started_session(self.spark) is None:  # a session never started ran no job
            self.result = JobCount(0)
            return
        store = _store(self.spark)
        if store is None:
            return
        after = _job_ids(store)
        new = sorted(j for j in after if j not in self._before)
        self.result = JobCount(len(new), [after[j] for j in new])

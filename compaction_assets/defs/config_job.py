"""The operator job that changes the topic configuration stored in the store (as `compaction config apply`)."""

import dagster as dg

from compaction_assets.errors import CompactionError
from compaction_assets.store.log_store import wall_ms
from compaction_assets.topics.applied_file import apply_topics_file
from compaction_assets.topics.config import load_topics
from compaction_assets.topics.config_store import ConfigStore, cleaned_logs_of, logged_topics
from resources.log_store import LogStoreResource


class ApplyTopicsConfig(dg.Config):
    topics_file: str  # the topics file to store (defaults and per-topic settings)
    confirm: bool = False  # allow a compaction.strategy change on logs already cleaned
    dry_run: bool = False  # report the diff, store nothing


@dg.op(description="Store a topics file's configuration in the log store; reports each key that changes.")
def apply_topics_config(
    context: dg.OpExecutionContext, config: ApplyTopicsConfig, log_store: LogStoreResource
) -> dg.Output:
    """Apply a topics file to the store's configuration (the same call as `compaction config apply`)."""
    store = log_store.store
    configs = ConfigStore(store.storage)
    try:
        topics = load_topics(config.topics_file)
        known = logged_topics(store)
        if config.dry_run:
            changes = [c for c in configs.plan_apply(topics, known) if c.changed]
        else:
            changes = apply_topics_file(
                configs,
                config.topics_file,
                f"dagster run {context.run_id}: config apply {config.topics_file}",
                wall_ms(),
                known,
                cleaned_logs_of(store),
                config.confirm,
            )
    except CompactionError as exc:
        raise dg.Failure(description=str(exc)) from None
    diff = {c.topic: c.changed for c in changes}
    context.log.info(f"{'would change' if config.dry_run else 'changed'}: {diff or 'nothing'}")
    return dg.Output(None, metadata={"changes": dg.MetadataValue.json(diff), "applied": not config.dry_run})


@dg.job(description="Change the topic configuration stored with the logs (explicit, recorded, versioned).")
def apply_topics_config_job():
    apply_topics_config()

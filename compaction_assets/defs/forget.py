"""The operator's erasure job: `forget_job` forgets keys in every log of a topic (CLI: forget), launchable
from the UI with the topic and the keys as config; the topic's table follows before the run ends."""

import dagster as dg

from compaction_assets.defs.clock import now_ms
from compaction_assets.defs.jobs import refuse
from compaction_assets.defs.table.table import follow_tables
from compaction_assets.errors import CompactionError
from compaction_assets.log.forget import forget
from compaction_assets.segments.records import decode_base64
from compaction_assets.store.names import check_topic
from resources.log_store import LogStoreResource


class ForgetConfig(dg.Config):
    """Keys to forget in every log of a topic (a GDPR erasure): their values leave the logs at once."""

    topic: str
    keys: list[str]  # UTF-8 text, or base64 with keys_base64
    keys_base64: bool = False


def _keys(config: ForgetConfig) -> list[bytes]:
    if not config.keys:
        raise refuse("forget: name at least one key")
    try:
        return [decode_base64(k, f"key {k!r}") if config.keys_base64 else k.encode("utf-8") for k in config.keys]
    except CompactionError as exc:
        raise refuse(str(exc)) from None


@dg.op(
    description="Forget keys in every log of a topic: each key's winner becomes a tombstone in place, its "
    "other records are removed, no offset is taken (CLI: forget)."
)
def forget_op(context: dg.OpExecutionContext, config: ForgetConfig, log_store: LogStoreResource) -> None:
    """Forget the keys in each log of the topic, then commit the topic's table."""
    try:
        check_topic(config.topic, "topic")
    except CompactionError as exc:
        raise refuse(str(exc)) from None
    keys = _keys(config)
    logs = sorted(n for n in log_store.store.logs() if log_store.handle(n).topic == config.topic)
    if not logs:
        raise refuse(f"no log of topic {config.topic!r} in the store")
    changed: list[str] = []
    per_log: dict[str, dict[str, object]] = {}
    for log in logs:
        try:
            done = forget(log_store.handle(log, must_exist=True), log_store.config_for(log), keys)
        except CompactionError as exc:
            raise refuse(f"{log}: {exc} (forgotten so far in: {', '.join(changed) or 'no log'})") from None
        per_log[log] = {
            "version": done.version,
            "files_rewritten": done.files_rewritten,
            "keys_changed": sum(k.changed for k in done.keys),
        }
        if done.changed:
            changed.append(log)
            context.log.info(f"{log}: forgot {per_log[log]['keys_changed']} key(s) at version {done.version}")
    follow_tables(log_store, changed, now_ms(), context.log.warning)  # the rows leave the table too
    context.add_output_metadata(
        {"topic": config.topic, "keys": len(keys), "logs_changed": changed, "per_log": dg.MetadataValue.json(per_log)}
    )


@dg.job(
    description="Forget keys in every log of a topic (a GDPR erasure; see `compaction reachable` for what remains)."
)
def forget_job():
    forget_op()

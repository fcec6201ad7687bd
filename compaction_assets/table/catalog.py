"""Where a store's topic tables live: the catalog, the warehouse, and the table name of a topic.

By default the catalog is a SQLite `SqlCatalog` kept with the store (`<store>/_tables/catalog.db`; its
everyday calls made by table/sqlite_catalog.py) and the warehouse is beside the logs
(`<store>/_tables/warehouse`); a store on S3 has its warehouse in the same
bucket, reached with the store's own S3 settings, and its SQLite catalog in a local file of its own
(`var/tables/<endpoint and store>/catalog.db`), since SQLite cannot live in a bucket: a deployment with
several hosts sets COMPACTION_TABLE_CATALOG_URI to a shared catalog (PostgreSQL, or a REST catalog with
COMPACTION_TABLE_CATALOG_TYPE=rest). Every setting comes from `compaction_assets.settings`.
"""

from __future__ import annotations

import os
import re
import threading
import time
from dataclasses import dataclass

from compaction_assets import settings
from compaction_assets.errors import CompactionError, first_line, os_error_message
from compaction_assets.redaction import redact_uri
from compaction_assets.store.fs import Storage
from compaction_assets.store.names import check_topic
from compaction_assets.topics.config import TABLE_NAME_RE

TABLES_FOLDER = "_tables"
LOCAL_CATALOGS_FOR_OBJECT_STORES = os.path.join("var", "tables")
CATALOG_NAME = "compaction"  # pyiceberg's name of the catalog (its rows' catalog_name, its configuration's key)
TOPIC_PROPERTY = "compaction.topic"  # the table's topic, as Kafka names it (the table name maps it)


class TableError(CompactionError):
    """A topic's table cannot be reached, named or written as the product expects (one line)."""


@dataclass(frozen=True, repr=False)
class CatalogLocation:
    """A resolved catalog: its pyiceberg type and properties, and the warehouse's URI. Its URI may hold a
    password and its IO properties hold the S3 keys: it is shown only as `describe` and its repr say."""

    catalog_type: str
    uri: str
    warehouse: str
    namespace: str
    buckets: int
    io_properties: tuple[tuple[str, str], ...] = ()

    def properties(self) -> dict[str, str]:
        """The pyiceberg catalog properties."""
        props = {"type": self.catalog_type, "uri": self.uri, "warehouse": self.warehouse}
        props.update(dict(self.io_properties))
        return props

    def describe(self) -> str:
        """The catalog as a message names it (a password in its URI masked)."""
        return f"{self.catalog_type} catalog {redact_uri(self.uri)}"

    def __repr__(self) -> str:
        return f"CatalogLocation({self.describe()}, warehouse {redact_uri(self.warehouse)}, namespace {self.namespace})"


def _s3_io_properties() -> tuple[tuple[str, str], ...]:
    """pyiceberg's S3 file IO with the store's own S3 settings (pyarrow's S3, as the store uses)."""
    so = settings.current().object_store
    props = {
        "py-io-impl": "pyiceberg.io.pyarrow.PyArrowFileIO",
        "s3.endpoint": so.endpoint_url,
        "s3.access-key-id": so.access_key_id,
        "s3.secret-access-key": so.secret_access_key,
        "s3.session-token": so.session_token,
        "s3.region": so.region or "us-east-1",
    }
    return tuple((k, v) for k, v in props.items() if v)


def locate(store: Storage, env: settings.TableSettings | None = None) -> CatalogLocation:
    """The catalog and warehouse of the store `store`, from the settings (defaults beside the store)."""
    env = env or settings.current().tables
    tables = store.join(TABLES_FOLDER)
    warehouse = env.warehouse or store.uri(store.join(TABLES_FOLDER, "warehouse"))
    if env.catalog_uri:
        uri = env.catalog_uri
    elif store.local:
        uri = f"sqlite:///{tables}/catalog.db"
    else:
        uri = f"sqlite:///{os.path.abspath(_local_catalog_of(store))}"
    io = _s3_io_properties() if warehouse.startswith(("s3://", "s3a://")) else ()
    return CatalogLocation(env.catalog_type, uri, warehouse, env.namespace, env.buckets, io)


def _local_catalog_of(store: Storage) -> str:
    """The local SQLite file of an object store's catalog: one per endpoint and store, so that two stores
    (or one bucket name on two servers) never share a catalog whose tables point at the other's files."""
    endpoint = settings.current().object_store.endpoint_url or "default"
    folder = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{endpoint}_{store.uri(store.root)}").strip("_")
    return os.path.join(LOCAL_CATALOGS_FOR_OBJECT_STORES, folder, "catalog.db")


_CATALOGS: dict[CatalogLocation, object] = {}
_CATALOGS_GUARD = threading.Lock()


def open_catalog(location: CatalogLocation):
    """The pyiceberg catalog at `location` (one per process and location); one line if it cannot be reached."""
    with _CATALOGS_GUARD:
        catalog = _CATALOGS.get(location)
        if catalog is not None:
            return catalog
        if location.uri.startswith("sqlite:///"):
            try:
                os.makedirs(os.path.dirname(location.uri[len("sqlite:///") :]) or ".", exist_ok=True)
            except OSError as exc:  # a read-only store: its reading commands show their other figures
                raise TableError(f"cannot open the table {location.describe()}: {os_error_message(exc)}") from None
        catalog = _load_catalog(location)
        _CATALOGS[location] = catalog
        return catalog


def _load_catalog(location: CatalogLocation, attempts: int = 5):
    """Load the catalog and make its namespace (processes starting at once may race to create either)."""
    for attempt in range(attempts):
        try:
            catalog = _catalog_of(location)
            if (location.namespace,) not in catalog.list_namespaces():
                catalog.create_namespace_if_not_exists(location.namespace)
            return catalog
        except Exception as exc:  # every driver and client has its own errors: one line for all of them
            if attempt == attempts - 1 or not _racing(exc):
                raise TableError(
                    f"cannot reach the table {location.describe()}: {first_line(exc)} "
                    "(COMPACTION_TABLE_CATALOG_URI / COMPACTION_TABLE_CATALOG_TYPE)"
                ) from None
            time.sleep(0.1 * (attempt + 1))


def _catalog_of(location: CatalogLocation):
    """The catalog itself: a SQLite file's through table/sqlite_catalog.py (no SQLAlchemy on a command's
    path), unless pyiceberg's own configuration (~/.pyiceberg.yaml, PYICEBERG_CATALOG__COMPACTION__*) adds
    to it; any other through pyiceberg's `load_catalog`, which merges that configuration."""
    from pyiceberg.catalog import load_catalog
    from pyiceberg.utils.config import Config

    sqlite = location.catalog_type == "sql" and location.uri.startswith("sqlite:///")
    if sqlite and not Config().get_catalog_config(CATALOG_NAME):
        from compaction_assets.table.sqlite_catalog import open_sqlite

        return open_sqlite(CATALOG_NAME, location.properties())
    return load_catalog(CATALOG_NAME, **location.properties())


def _racing(exc: BaseException) -> bool:
    """An error of two processes creating the catalog's tables or namespace at once (worth a retry)."""
    text = str(exc).lower()
    return any(word in text for word in ("already exists", "locked", "unique constraint", "integrity"))


def table_name(topic: str, configured: str | None = None) -> str:
    """The table name of a topic: its `table.name` when set (`configured`), else the topic's name with each
    '.' as '_' (a dot separates a namespace)."""
    check_topic(topic)
    if configured is not None:
        return configured  # validated with the topic's configuration (topics/config.py)
    name = topic.replace(".", "_")
    if not TABLE_NAME_RE.fullmatch(name):
        raise TableError(
            f"topic {topic!r} maps to table name {name!r} (each '.' becomes '_'), which is not a valid table name"
        )
    return name


def identifier(location: CatalogLocation, topic: str, configured: str | None = None) -> str:
    """`<namespace>.<table>` of a topic (`configured`: its `table.name`)."""
    return f"{location.namespace}.{table_name(topic, configured)}"


def stored_table_name(store: Storage, topic: str) -> str | None:
    """The topic's `table.name` as the store's configuration holds it (None: derived from the topic's name),
    for readers of a table that have no TopicConfig at hand."""
    from compaction_assets.topics.config_store import ConfigStore

    return ConfigStore(store).effective(topic).get("table.name")

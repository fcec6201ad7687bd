"""The default SQLite catalog's everyday calls without SQLAlchemy: loading a table, committing one, listing.

pyiceberg's `SqlCatalog` imports SQLAlchemy and its ORM, which is most of what a short command pays for the
table beside its own work (docs/performance.md, "The table commit's imports"). A catalog in a SQLite file
needs none of it for what every command does: this catalog reads and writes the same two tables of the same
file, row for row as `SqlCatalog` does with its current (v1) schema, through the standard library's sqlite3:
a table's metadata location, the optimistic commit (`UPDATE ... WHERE metadata_location` = the one the commit
read, refused as `CommitFailedException` when another process moved it; the first commit inserts the row),
the namespaces and the tables. Everything else (creating the catalog's tables, namespaces, dropping,
renaming, registering) is `SqlCatalog`'s own, made on first use over the same file. A catalog file of
pyiceberg's older (v0) schema, or one other settings shape, is opened as a `SqlCatalog` (`open_sqlite`).
The metadata files are pyiceberg's: it stages (table/iceberg_internals.py) and writes them.
"""

from __future__ import annotations

import sqlite3
import threading
from contextlib import closing
from typing import TYPE_CHECKING

from pyiceberg.catalog import Catalog, MetastoreCatalog
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError, TableAlreadyExistsError
from pyiceberg.io import load_file_io
from pyiceberg.serializers import FromInputFile, ToOutputFile
from pyiceberg.table import CommitTableResponse, Table

if TYPE_CHECKING:
    from pyiceberg.table.update import TableRequirement, TableUpdate
    from pyiceberg.typedef import Identifier, Properties

SQLITE_PREFIX = "sqlite:///"
TABLE_TYPE = "TABLE"  # SqlCatalog's `iceberg_type` of a table row (a view's differs)
# SqlCatalog's settings that change its SQL (echo, pool, schema migration): such a catalog is SqlCatalog's
SQLALCHEMY_SETTINGS = ("echo", "pool_pre_ping", "init_catalog_tables", "schema_version")
_TABLE_ROW = "catalog_name = ? AND table_namespace = ? AND table_name = ?"
_IS_TABLE = "(iceberg_type = 'TABLE' OR iceberg_type IS NULL)"  # SqlCatalog's type filter


def open_sqlite(name: str, properties: dict[str, str]) -> Catalog:
    """The SQLite catalog at `properties['uri']`: this module's when its file has SqlCatalog's current
    schema (made first by SqlCatalog when the file has no catalog yet), else pyiceberg's SqlCatalog."""
    path = properties["uri"][len(SQLITE_PREFIX) :]
    if any(key in properties for key in SQLALCHEMY_SETTINGS):
        return _sql_catalog(name, properties)
    if _has_current_schema(path):
        return SqliteCatalog(name, **properties)
    made = _sql_catalog(name, properties)  # creates the catalog's tables (the current schema), or reads a v0 one
    return SqliteCatalog(name, **properties) if _has_current_schema(path) else made


def _sql_catalog(name: str, properties: dict[str, str]) -> Catalog:
    from pyiceberg.catalog.sql import SqlCatalog

    return SqlCatalog(name, **properties)


def _has_current_schema(path: str) -> bool:
    """Whether the file holds SqlCatalog's two tables with their current (v1) columns."""
    try:
        with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as connection:
            tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if not {"iceberg_tables", "iceberg_namespace_properties"} <= tables:
                return False
            return "iceberg_type" in {row[1] for row in connection.execute("PRAGMA table_info(iceberg_tables)")}
    except sqlite3.Error:  # no file yet, or not a database: SqlCatalog makes it or says why
        return False


def _response(table: Table) -> CommitTableResponse:
    """A commit's answer: the table's metadata and its location (pydantic takes the field's name too)."""
    return CommitTableResponse(metadata=table.metadata, metadata_location=table.metadata_location)  # type: ignore[call-arg]


class SqliteCatalog(MetastoreCatalog):
    """SqlCatalog's rows in a SQLite file, read and written with sqlite3 for the calls every command makes;
    the rest are SqlCatalog's (`_sql`, made once, on first use)."""

    def __init__(self, name: str, **properties: str) -> None:
        super().__init__(name, **properties)
        self.path = properties["uri"][len(SQLITE_PREFIX) :]
        self._full: Catalog | None = None
        self._guard = threading.Lock()

    def _connect(self) -> sqlite3.Connection:
        # a connection a call: one is cheap, and none is shared between the threads of a Dagster run
        return sqlite3.connect(self.path, timeout=5.0)

    def _sql(self) -> Catalog:
        """pyiceberg's SqlCatalog over the same file, for the calls this catalog leaves to it."""
        with self._guard:
            if self._full is None:
                self._full = _sql_catalog(self.name, dict(self.properties))
            return self._full

    def load_table(self, identifier: str | Identifier) -> Table:
        namespace = Catalog.namespace_to_string(Catalog.namespace_from(identifier))
        table_name = Catalog.table_name_from(identifier)
        with closing(self._connect()) as connection:
            row = connection.execute(
                f"SELECT metadata_location FROM iceberg_tables WHERE {_TABLE_ROW} AND {_IS_TABLE}",
                (self.name, namespace, table_name),
            ).fetchone()
        if row is None:
            raise NoSuchTableError(f"Table does not exist: {namespace}.{table_name}")
        if not row[0]:
            raise NoSuchTableError("Table property metadata_location is missing")
        return self._read_table(Catalog.identifier_to_tuple(namespace) + (table_name,), row[0])

    def _read_table(self, identifier: Identifier, metadata_location: str) -> Table:
        """The table whose metadata is at `metadata_location`, as SqlCatalog builds it."""
        metadata = FromInputFile.table_metadata(
            load_file_io(self.properties, metadata_location).new_input(metadata_location)
        )
        io = load_file_io({**self.properties, **metadata.properties}, metadata_location)
        return Table(identifier=identifier, metadata=metadata, metadata_location=metadata_location, io=io, catalog=self)

    def commit_table(
        self, table: Table, requirements: tuple[TableRequirement, ...], updates: tuple[TableUpdate, ...]
    ) -> CommitTableResponse:
        """SqlCatalog's commit: the updates staged on the current metadata, written, and the row moved to
        them only if no other commit moved it first (else `CommitFailedException`); the first inserts it."""
        from compaction_assets.table.iceberg_internals import stage_table_update

        identifier = table.name()
        namespace = Catalog.namespace_to_string(Catalog.namespace_from(identifier))
        table_name = Catalog.table_name_from(identifier)
        try:
            current: Table | None = self.load_table(identifier)
        except NoSuchTableError:
            current = None
        staged = stage_table_update(self, current, identifier, requirements, updates)
        if current is not None and staged.metadata == current.metadata:
            return _response(current)
        ToOutputFile.table_metadata(staged.metadata, staged.io.new_output(staged.metadata_location))
        with closing(self._connect()) as connection, connection:
            if current is not None:
                moved = connection.execute(
                    "UPDATE iceberg_tables SET metadata_location = ?, previous_metadata_location = ? "
                    f"WHERE {_TABLE_ROW} AND metadata_location = ?",
                    (staged.metadata_location, current.metadata_location, self.name, namespace, table_name)
                    + (current.metadata_location,),
                )
                if moved.rowcount < 1:
                    raise CommitFailedException(f"Table has been updated by another process: {namespace}.{table_name}")
            else:
                self._insert(connection, namespace, table_name, staged.metadata_location)
        return _response(staged)

    def _insert(self, connection: sqlite3.Connection, namespace: str, table_name: str, metadata_location: str) -> None:
        """A new table's row, as SqlCatalog inserts it."""
        try:
            connection.execute(
                "INSERT INTO iceberg_tables (catalog_name, table_namespace, table_name, metadata_location, "
                "previous_metadata_location, iceberg_type) VALUES (?, ?, ?, ?, NULL, ?)",
                (self.name, namespace, table_name, metadata_location, TABLE_TYPE),
            )
        except sqlite3.IntegrityError as exc:
            raise TableAlreadyExistsError(f"Table {namespace}.{table_name} already exists") from exc

    def list_namespaces(self, namespace: str | Identifier = ()) -> list[Identifier]:
        if namespace:  # a namespace's children: SqlCatalog's (not on a command's path)
            return self._sql().list_namespaces(namespace)
        with closing(self._connect()) as connection:
            names = connection.execute(
                "SELECT table_namespace FROM iceberg_tables WHERE catalog_name = ? "
                "UNION SELECT namespace FROM iceberg_namespace_properties WHERE catalog_name = ?",
                (self.name, self.name),
            ).fetchall()
        return list({Catalog.identifier_to_tuple(row[0])[:1] for row in names if row[0]})

    # The rest is SqlCatalog's, on the same file (its own signatures and defaults).
    def create_table(self, *args, **kwargs):
        return self._sql().create_table(*args, **kwargs)

    def register_table(self, *args, **kwargs):
        return self._sql().register_table(*args, **kwargs)

    def drop_table(self, identifier: str | Identifier) -> None:
        self._sql().drop_table(identifier)

    def rename_table(self, from_identifier: str | Identifier, to_identifier: str | Identifier) -> Table:
        return self._sql().rename_table(from_identifier, to_identifier)

    def namespace_exists(self, namespace: str | Identifier) -> bool:
        return self._sql().namespace_exists(namespace)

    def create_namespace(self, *args, **kwargs):
        self._sql().create_namespace(*args, **kwargs)

    def drop_namespace(self, namespace: str | Identifier) -> None:
        self._sql().drop_namespace(namespace)

    def list_tables(self, namespace: str | Identifier) -> list[Identifier]:
        return self._sql().list_tables(namespace)

    def load_namespace_properties(self, namespace: str | Identifier) -> Properties:
        return self._sql().load_namespace_properties(namespace)

    def update_namespace_properties(self, *args, **kwargs):
        return self._sql().update_namespace_properties(*args, **kwargs)

    def create_view(self, *args, **kwargs):
        return self._sql().create_view(*args, **kwargs)

    def list_views(self, namespace: str | Identifier) -> list[Identifier]:
        return self._sql().list_views(namespace)

    def view_exists(self, identifier: str | Identifier) -> bool:
        return self._sql().view_exists(identifier)

    def register_view(self, *args, **kwargs):
        return self._sql().register_view(*args, **kwargs)

    def drop_view(self, identifier: str | Identifier) -> None:
        self._sql().drop_view(identifier)

    def load_view(self, *args, **kwargs):
        return self._sql().load_view(*args, **kwargs)

"""pyiceberg's private parts the table uses stay where table/iceberg_internals.py expects them: an upgrade of
pyiceberg fails here, loudly, before a commit writes a wrong snapshot."""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import re
from pathlib import Path

import pyarrow as pa
import pytest

from compaction_assets.table import iceberg_internals
from compaction_assets.table.commit.delta import row_delta

ROOT = Path(__file__).resolve().parents[2]
ADAPTER = ROOT / "compaction_assets" / "table" / "iceberg_internals.py"
TABLE = ROOT / "compaction_assets" / "table"


def _pinned_pyiceberg() -> str:
    """The pyiceberg version pyproject.toml pins among the dependencies (`pyiceberg[...]==X`)."""
    text = (ROOT / "pyproject.toml").read_text()
    found = re.search(r'^\s*"pyiceberg(?:\[[^\]]*\])?==([^"]+)"', text, re.MULTILINE)
    assert found, "pyproject.toml pins no pyiceberg version (`pyiceberg[...]==X`)"
    return found.group(1)


def test_the_installed_pyiceberg_is_the_pinned_one():
    installed, pinned = importlib.metadata.version("pyiceberg"), _pinned_pyiceberg()
    names = ", ".join(f"{owner}.{name}" for owner, name in iceberg_internals.PRIVATE_NAMES)
    assert installed == pinned, (
        f"pyiceberg {installed} is installed, pyproject.toml pins {pinned}: before changing the pin, re-check "
        "compaction_assets/table/iceberg_internals.py against the new version (each private name its docstring "
        f"lists: {names}): their signatures, what `_SnapshotProducer._commit` and `Transaction.commit_transaction` "
        "call on a producer, and whether a public API now writes position deletes, which would replace it"
    )


def _resolve(dotted: str) -> object:
    """A module, or an attribute of one (a class), by its dotted name."""
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:split]))
        except ModuleNotFoundError:
            continue
        for part in parts[split:]:
            found = getattr(found, part)
        return found
    raise ModuleNotFoundError(dotted)


def _declared(owner: object, name: str) -> bool:
    """Whether `owner` has `name`: an attribute, or for a class an instance attribute it annotates."""
    if hasattr(owner, name):
        return True
    return isinstance(owner, type) and any(name in vars(k).get("__annotations__", {}) for k in owner.__mro__)


@pytest.mark.parametrize("owner, name", iceberg_internals.PRIVATE_NAMES, ids=lambda v: v)
def test_each_private_name_the_adapter_uses_exists(owner, name):
    assert _declared(_resolve(owner), name), (
        f"{owner}.{name} is gone from pyiceberg {importlib.metadata.version('pyiceberg')}: "
        "compaction_assets/table/iceberg_internals.py relies on it (see its docstring for why)"
    )


def _private_names_in(path: Path) -> set[str]:
    """The private names (one leading underscore) a module imports, reads or overrides, but not its own."""
    tree = ast.parse(path.read_text(), filename=str(path))
    own = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            found.add(node.name)
    return {n for n in found if n.startswith("_") and not n.startswith("__") and n not in own}


def test_the_adapter_lists_every_private_name_it_uses():
    listed = {name for _, name in iceberg_internals.PRIVATE_NAMES}
    assert _private_names_in(ADAPTER) == listed
    doc = iceberg_internals.__doc__ or ""
    assert not [name for name in listed if f"`{name}`" not in doc and f".{name}`" not in doc]


def test_no_other_module_of_the_table_uses_a_private_name_of_pyiceberg():
    # the table's own private helpers (a leading underscore) are found too: only pyiceberg's are refused
    pyiceberg_names = {name for _, name in iceberg_internals.PRIVATE_NAMES}
    users = {
        path.name: sorted(_private_names_in(path) & pyiceberg_names)
        for path in sorted(TABLE.glob("*.py"))
        if path != ADAPTER
    }
    assert not {name: used for name, used in users.items() if used}


def test_the_row_delta_producer_sees_what_it_relies_on(tmp_path):
    """A producer on a live transaction has each attribute the adapter reads or writes."""
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}/warehouse")
    catalog.create_namespace("n")
    table = catalog.create_table("n.t", schema=pa.schema([pa.field("key", pa.binary())]))
    tx = table.transaction()
    producer = row_delta(tx, {}, [], set())
    assert iceberg_internals.transaction_io(tx) is producer.io
    assert producer.parent_snapshot() is None
    instance = [name for owner, name in iceberg_internals.PRIVATE_NAMES if owner.endswith("._SnapshotProducer")]
    assert not [name for name in instance if not hasattr(producer, name)]

"""The layout's rules, read from the source (docs/architecture.md, "The layers"): which folder may import
which, Dagster only in the shell, the environment read in `settings.py` only."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "compaction_assets"


def _imports(path: Path) -> set[str]:
    """Every module a file imports (absolute names; relative imports resolved against its package)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def _files(*folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py"))


# The product's packages from the bottom up (docs/architecture.md, "The layers"): each may import only the
# packages before it, never one after it, nor Dagster, the Dagster shell or the entry points.
LAYERS = (
    "redaction",
    "errors",
    "variables",
    "settings",
    "spark",
    "store",
    "segments",
    "topics",
    "log",
    "ingest",
    "planning",
    "cleaning",
    "state",
    "table",
    "checks",
)
ABOVE_EVERY_LAYER = (
    "compaction_assets.defs",
    "compaction_assets.cli",
    "compaction_assets.demo",
    "compaction_assets.warm_start",
    "compaction_assets.conformance",
    "compaction_assets.definitions",
    "resources",
    "dagster",
)
# the checks are an independent reading of the spec: nothing of the cleaning, nor the strategies' ranking it uses
INDEPENDENT = {"checks": ("compaction_assets.cleaning", "compaction_assets.log.strategies")}


def _forbidden(layer: str) -> tuple[str, ...]:
    above = LAYERS[LAYERS.index(layer) + 1 :]
    return (*(f"compaction_assets.{name}" for name in above), *ABOVE_EVERY_LAYER, *INDEPENDENT.get(layer, ()))


def _layer_files(layer: str) -> list[Path]:
    single = PACKAGE / f"{layer}.py"
    return [single] if single.exists() else _files(f"compaction_assets/{layer}")


def test_every_package_of_the_product_has_its_place():
    """Every folder and module of compaction_assets/ is a layer above, the shell or an entry point."""
    shell_and_entry_points = {"defs", "cli", "demo", "warm_start", "conformance", "definitions", "__init__", "__main__"}
    places = {
        p.stem if p.is_file() else p.name
        for p in PACKAGE.iterdir()
        if (p.is_dir() and (p / "__init__.py").exists()) or p.suffix == ".py"
    }
    assert places - set(LAYERS) - shell_and_entry_points == set()


@pytest.mark.parametrize("layer", LAYERS)
def test_layer_imports_only_what_it_may(layer):
    files = _layer_files(layer)
    assert files, f"no files for the layer {layer}"
    crossings = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in files
        for name in sorted(_imports(path))
        if any(name == bad or name.startswith(bad + ".") for bad in _forbidden(layer))
    ]
    assert not crossings, "\n".join(crossings)


def test_the_layer_rule_finds_an_import_going_up():
    assert "compaction_assets.cleaning" in _forbidden("log")
    assert "compaction_assets.log" not in _forbidden("cleaning")
    assert "compaction_assets.log.strategies" in _forbidden("checks")


def test_only_the_shell_imports_dagster():
    shell = (
        "compaction_assets/defs/",
        "compaction_assets/definitions.py",
        "compaction_assets/demo/__init__.py",
        "resources/",
    )
    users = [
        str(p.relative_to(ROOT))
        for p in _files("compaction_assets", "resources")
        if any(n == "dagster" or n.startswith(("dagster.", "dagster_")) for n in _imports(p))
    ]
    assert users, "the shell imports Dagster: the scan must find it"
    assert [u for u in users if not u.startswith(shell)] == []


# a folder a newcomer takes in at a glance: past this many modules it splits into sub-packages, one concept each
MOST_MODULES_A_FOLDER = 15


def test_no_folder_of_the_product_holds_more_than_a_glance():
    """Every folder of compaction_assets/ holds at most MOST_MODULES_A_FOLDER modules (its __init__.py counted)."""
    folders = {p.parent for p in _files("compaction_assets")}
    assert len(folders) > 1, "the scan must see the product's folders"
    crowded = {
        str(folder.relative_to(ROOT)): count
        for folder in sorted(folders)
        if (count := len(list(folder.glob("*.py")))) > MOST_MODULES_A_FOLDER
    }
    assert crowded == {}


def test_environment_is_read_in_settings_only():
    readers = sorted(
        str(p.relative_to(ROOT))
        for p in _files("compaction_assets", "resources")
        if "os.environ" in p.read_text() or "os.getenv" in p.read_text()
    )
    assert readers == ["compaction_assets/settings.py"]


def test_nothing_imports_dagster_private_modules():
    """Only Dagster's public API: no `dagster._...` import in the product, the tests or the benchmark."""
    files = _files("compaction_assets", "resources", "tests", "bench")
    assert any("dagster" in _imports(p) for p in files), "the scan must see the imports of dagster"
    private = [
        f"{p.relative_to(ROOT)} imports {name}"
        for p in files
        for name in sorted(_imports(p))
        if name.startswith("dagster._") or name.startswith("dagster_pyspark._")
    ]
    assert private == [], "\n".join(private)


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> dict[str, set[str]]:
    """Module -> the product's modules it imports, anywhere in its body (function-local imports and
    imports under `if TYPE_CHECKING` included: a cycle is a cycle however it is written)."""
    files = {_module_name(p): p for p in _files("compaction_assets")}
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        # `from package import module` names the module; `from module import name` names the module
        targets = {name if name in files else name.rpartition(".")[0] for name in _imports(path)}
        graph[module] = {t for t in targets if t in files and t != module and not module.startswith(t + ".")}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each strongly connected group of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_among_the_products_modules():
    graph = _import_graph()
    assert "compaction_assets.cleaning.decide.arrow_decision" in graph["compaction_assets.cleaning.cleaner"], (
        "the scan must see the imports between the product's modules"
    )
    assert _cycles(graph) == []


def test_the_cycle_finder_sees_function_local_imports_and_finds_cycles():
    graph = _import_graph()
    # cli_context imports the Spark module inside a function (Spark-free commands start faster)
    assert "compaction_assets.spark" in graph["compaction_assets.cli.context"]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b"]]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []

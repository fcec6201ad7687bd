"""The house rules a newcomer relies on (issue 29), read from the source with `ast`: no module of
compaction_assets/ over 400 lines, no function over 60, and no test patching an attribute of the
product (tests pass their own `CleanerTuning`, parameter or resource instead)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "compaction_assets"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
PRODUCT_PACKAGES = ("compaction_assets", "resources")


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_no_module_is_over_400_lines():
    long = [
        f"{p.relative_to(ROOT)}: {n} lines"
        for p in _modules()
        if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    ]
    assert not long, "\n".join(long)


def test_no_function_is_over_60_lines():
    long = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {lines} lines")
    assert not long, "\n".join(long)


def _product_names(tree: ast.AST) -> set[str]:
    """Names a test module binds to a module of the product, or to anything imported from one."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {
                (a.asname or a.name).split(".")[0] for a in node.names if a.name.split(".")[0] in PRODUCT_PACKAGES
            }
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in PRODUCT_PACKAGES:
            names |= {a.asname or a.name for a in node.names}
    return names


def _root(node: ast.AST) -> str | None:
    """The name an attribute chain starts from (`store.Lease.check`: `store`)."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _patches(source: str, name: str) -> list[str]:
    """Where a test module patches an attribute of the product: `monkeypatch.setattr(obj, ...)`,
    `setattr(obj, ...)`, `mock.patch("compaction_assets...")` / `patch.object(obj, ...)`, `obj.name = ...`."""
    tree = ast.parse(source, filename=name)
    product = _product_names(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args:
            func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            first = node.args[0]
            named = isinstance(first, ast.Constant) and str(first.value).split(".")[0] in PRODUCT_PACKAGES
            if func in ("setattr", "object", "patch") and (named or _root(first) in product):
                found.append((node.lineno, f"{name}:{node.lineno} {ast.unparse(node)[:80]}"))
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            found += [
                (node.lineno, f"{name}:{node.lineno} {ast.unparse(t)} = ...")
                for t in targets
                if isinstance(t, ast.Attribute) and _root(t) in product
            ]
    return [hit for _, hit in sorted(found)]


def test_no_test_patches_an_attribute_of_the_product():
    """No test changes a module global (or a class) of the product: such a patch is state shared with
    every other test of the session, and a move of the code silently stops it taking effect. Tests hand
    their own values instead: a CleanerTuning (its `reads`, its `rewrite_plan`), a parameter, a
    resource, an environment variable (`monkeypatch.setenv` is fine)."""
    patched = [
        hit
        for path in sorted((ROOT / "tests").rglob("*.py"))
        if path != Path(__file__)
        for hit in _patches(path.read_text(), str(path.relative_to(ROOT)))
    ]
    assert not patched, "\n".join(patched)


def test_the_patch_finder_finds_each_kind_of_patch():
    """The finder above sees each form (else its test could not fail)."""
    sample = (
        "from compaction_assets.cleaning import layout\n"
        "from compaction_assets.log import store\n"
        "import compaction_assets.cli as cli\n"
        "from unittest import mock\n"
        "def test(monkeypatch, handle):\n"
        "    monkeypatch.setattr(layout, 'rewrite_plan', None)\n"
        "    monkeypatch.setattr(store.Lease, 'check', None)\n"
        "    setattr(cli, 'build_parser', None)\n"
        "    mock.patch('compaction_assets.cli.build_parser')\n"
        "    mock.patch.object(store, 'wall_ms')\n"
        "    layout.rewrite_plan = None\n"
        "    monkeypatch.setenv('COMPACTION_DEBUG', '1')\n"
        "    handle.update = None\n"
    )
    hits = _patches(sample, "sample.py")
    assert [int(h.split(":")[1].split()[0]) for h in hits] == [6, 7, 8, 9, 10, 11], hits


def test_the_tuning_names_the_figure_each_threshold_wins():
    """Every field of CleanerTuning has a comment above it (its reason, the figure it wins)."""
    source = (PACKAGE / "cleaning" / "tuning.py").read_text().splitlines()
    fields = [i for i, line in enumerate(source) if re.match(r"    [a-z_]+: (int|float|bool) = ", line)]
    assert len(fields) >= 19
    bare = [
        source[i].strip()
        for i in fields
        if not source[i - 1].strip().startswith("#") and not re.match(r"    [a-z_]+: ", source[i - 1])
    ]
    assert not bare, bare

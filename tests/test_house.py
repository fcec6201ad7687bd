"""The house rules a newcomer relies on (issue 29), read from the source with `ast`: no module of
compaction_assets/ over 400 lines, no function over 60, and no test patching a module global of the
cleaning (tests pass their own `CleanerTuning` instead)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "compaction_assets"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_no_module_is_over_400_lines():
    long = [f"{p.relative_to(ROOT)}: {n} lines" for p in _modules()
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES]
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


def test_no_test_patches_a_module_global_of_the_cleaning():
    """`monkeypatch.setattr(<a module of cleaning/>, ...)`: the split would silently stop such a patch
    taking effect, so tests pass a CleanerTuning to `engine.run` / `decide` instead. The one exception
    is the fault a test injects on purpose (a wrong rewrite plan, so that the checks must catch it)."""
    cleaning = {p.stem for p in (PACKAGE / "cleaning").glob("*.py")}
    patched = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        if path == Path(__file__):
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "setattr"
                    and node.args and isinstance(node.args[0], ast.Name) and node.args[0].id in cleaning):
                target = ast.literal_eval(node.args[1]) if isinstance(node.args[1], ast.Constant) else "?"
                if (node.args[0].id, target) != ("layout", "rewrite_plan"):
                    patched.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.args[0].id}.{target}")
    assert not patched, "\n".join(patched)


def test_the_tuning_names_the_figure_each_threshold_wins():
    """Every field of CleanerTuning has a comment above it (its reason, the figure it wins)."""
    source = (PACKAGE / "cleaning" / "tuning.py").read_text().splitlines()
    fields = [i for i, line in enumerate(source) if re.match(r"    [a-z_]+: (int|float|bool) = ", line)]
    assert len(fields) >= 19
    bare = [source[i].strip() for i in fields if not source[i - 1].strip().startswith("#")
            and not re.match(r"    [a-z_]+: ", source[i - 1])]
    assert not bare, bare

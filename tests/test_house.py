"""The house rules a newcomer relies on, read from the source with `ast` and `tokenize`: no module of
compaction_assets/ over 400 lines, no function over 60, no test patching an attribute of the product
(tests pass their own `CleanerTuning`, parameter or resource instead), no comment quoting a measured time
(figures live in docs/performance.md), and a reason above every field of `CleanerTuning`."""

from __future__ import annotations

import ast
import io
import re
import tokenize
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
        "    setattr(cli, 'COMPACTION', None)\n"
        "    mock.patch('compaction_assets.cli.COMPACTION')\n"
        "    mock.patch.object(store, 'wall_ms')\n"
        "    layout.rewrite_plan = None\n"
        "    monkeypatch.setenv('COMPACTION_DEBUG', '1')\n"
        "    handle.update = None\n"
    )
    hits = _patches(sample, "sample.py")
    assert [int(h.split(":")[1].split()[0]) for h in hits] == [6, 7, 8, 9, 10, 11], hits


# A timing in a comment: a decimal, a range or a before/after of seconds, or any count of ms, µs or ns.
_UNIT = r"(?:s|ms|µs|us|ns|seconds?)\b"
_NUMBER = r"\d[\d,]*(?:\.\d+)?"
TIMING = re.compile(
    rf"\b\d+\.\d+ ?{_UNIT}"  # 0.3 s, 2.5 seconds
    rf"|\b{_NUMBER} ?(?:{_UNIT})? ?(?:-|\u2013|->|→|to) ?{_NUMBER} ?{_UNIT}"  # 70-95 ms, 1.6 s -> 0.5 s
    r"|\b\d[\d,]* ?(?:ms|µs|us|ns)\b"  # 23 ms
)
# Figures in comments that are the code's own values or examples, not measurements.
TIMING_ALLOWED = (
    "1500 ms",  # planning/planner.py: how a duration is printed
    "0.8, 3.2 s",  # spark/__init__.py: the Connect client's retry backoff, as the code sets it
)


def _comments(path: Path) -> list[tuple[int, str]]:
    """Every comment and every string statement (docstrings included) of a module, with its line."""
    source = path.read_text()
    found = [
        (tok.start[0], tok.string)
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type == tokenize.COMMENT
    ]
    found += [
        (node.lineno, node.value.value)
        for node in ast.walk(ast.parse(source, filename=str(path)))
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
    ]
    return sorted(found)


def _timings(text: str) -> list[str]:
    text = " ".join(text.split())  # a figure may be wrapped over two lines
    for allowed in TIMING_ALLOWED:
        text = text.replace(allowed, "")
    return [m.group(0) for m in TIMING.finditer(text)]


def test_no_comment_quotes_a_measured_time():
    """Comments and docstrings of the product say why the code is so; the seconds an experiment measured
    go to docs/performance.md ("Why the thresholds are where they are") and to the commit message, where
    they stay true of the run that measured them."""
    quoted = [
        f"{path.relative_to(ROOT)}:{line}: {', '.join(hits)}"
        for package in PRODUCT_PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        for line, text in _comments(path)
        if (hits := _timings(text))
    ]
    assert not quoted, (
        "comments quote measured times: say why the code is so, and put the figures in docs/performance.md "
        "(section 'Why the thresholds are where they are') and the commit message\n" + "\n".join(quoted)
    )


def test_the_timing_finder_finds_figures_not_settings():
    """The pattern above sees each form of a measured time (else its test could not fail), and passes the
    settings and defaults comments legitimately name."""
    measured = ["0.3 s here", "70-95 ms", "1.6 s -> 0.5 s", "took 23 ms", "425 s against 262-333 s", "2.5 seconds"]
    assert [bool(_timings(text)) for text in measured] == [True] * len(measured)
    settings = ["every 5 s", "at least 10 minutes", "the webserver's 15 s", "(1 day, 90 minutes, 1500 ms)"]
    assert [_timings(text) for text in settings] == [[]] * len(settings)


def test_every_tuning_field_has_its_reason():
    """Every field of CleanerTuning has a comment above it saying why its threshold is there (a field right
    under another shares that one's); what a threshold was measured to win is in docs/performance.md."""
    path = PACKAGE / "cleaning" / "tuning.py"
    source = path.read_text().splitlines()
    tuning = next(
        node
        for node in ast.walk(ast.parse("\n".join(source), filename=str(path)))
        if isinstance(node, ast.ClassDef) and node.name == "CleanerTuning"
    )
    fields = [node.lineno for node in tuning.body if isinstance(node, ast.AnnAssign)]
    assert len(fields) >= 19
    bare = [
        source[line - 1].strip()
        for line in fields
        if not source[line - 2].strip().startswith("#") and line - 1 not in fields
    ]
    assert not bare, f"CleanerTuning fields without a comment saying why: {bare}"

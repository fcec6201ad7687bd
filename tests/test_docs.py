"""The documentation stays true of the code where a test can tell (no Spark, fast):

- docs/configuration.md's environment table is exactly the one `compaction_assets/settings.py`'s declarations
  generate, and `settings.current()` reads declared variables only;
- every topic key in its topic-keys table is a key of `topics/config.py`, with that key's built-in default
  (checked one way: the code may know keys the table does not list yet);
- every relative link (and image) in README.md, docs/ and bench/results/ points to a file that exists,
  and a link to a section names a heading of that file;
- every command and option of the command line appears in docs/cli.md;
- the README stays a front door.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
CONFIGURATION = DOCS / "configuration.md"
README_MAX_LINES = 250
ENV_NAME = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*")


def _documents() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md")), *sorted((ROOT / "bench" / "results").glob("*.md"))]


def _table_after(path: Path, marker: str) -> list[list[str]]:
    """The rows (cells, stripped) of the Markdown table right after `marker`, header and rule excluded."""
    lines = path.read_text(encoding="utf-8").splitlines()
    assert marker in lines, f"{path.relative_to(ROOT)} has no {marker}"
    start = lines.index(marker) + 1
    while start < len(lines) and not lines[start].startswith("|"):
        start += 1
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    assert len(rows) > 2, f"{path.relative_to(ROOT)}: no table after {marker}"
    return rows[2:]


def _code_names(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


# --- the environment table against settings.py --------------------------------------------------------


def declared_variables() -> set[str]:
    """The variables settings.py declares (`ENVIRONMENT.declare`)."""
    from compaction_assets import settings

    return set(settings.ENVIRONMENT.variables)


class _Recording(Mapping):
    """An empty environment that remembers every name asked of it."""

    def __init__(self):
        self.asked: set[str] = set()

    def __getitem__(self, name):
        self.asked.add(name)
        raise KeyError(name)

    def __iter__(self):
        return iter(())

    def __len__(self):
        return 0


def variables_read_by_settings() -> set[str]:
    """Every variable settings.py names, checked against what `settings.current()` asks of an environment."""
    from compaction_assets import settings

    declared = declared_variables()
    env = _Recording()
    settings.current(env)
    undeclared = env.asked - declared
    assert not undeclared, f"settings.current() reads {sorted(undeclared)} without a declaration"
    return declared


def documented_variables() -> list[str]:
    names = []
    for row in _table_after(CONFIGURATION, "<!-- environment-table -->"):
        cell = _code_names(row[0])
        assert len(cell) == 1 and ENV_NAME.fullmatch(cell[0]), f"not one variable name: {row[0]!r}"
        names.append(cell[0])
    return names


def test_the_environment_table_names_every_variable_settings_reads():
    missing = variables_read_by_settings() - set(documented_variables())
    assert not missing, f"docs/configuration.md's environment table lacks {sorted(missing)}"


def test_every_variable_in_the_environment_table_is_read_by_settings():
    documented = documented_variables()
    assert len(documented) == len(set(documented)), "a variable appears twice in the environment table"
    unknown = set(documented) - variables_read_by_settings()
    assert not unknown, f"docs/configuration.md documents {sorted(unknown)}, which settings.py does not read"


def test_the_environment_table_is_the_one_the_declarations_generate():
    from compaction_assets import settings, variables

    document = CONFIGURATION.read_text(encoding="utf-8")
    assert variables.with_table(document, settings.ENVIRONMENT.markdown_table()) == document, (
        "docs/configuration.md's environment table is not what settings.py declares; regenerate it with "
        "`python -m compaction_assets.settings --docs docs/configuration.md`"
    )


def test_the_reading_is_seen():
    """The scan finds what settings.py reads (a scan that found nothing would pass the tests above)."""
    names = variables_read_by_settings()
    assert {"COMPACTION_STORE", "SPARK_REMOTE", "AWS_ENDPOINT_URL", "DAGSTER_HOME"} <= names


# --- the topic keys -------------------------------------------------------------------------------------


def _doc_value(value) -> str:
    return "null" if value is None else str(value)


def test_every_documented_topic_key_exists_with_its_default():
    from compaction_assets.topics import config

    defaults = {**config.DEFAULTS, **config.LANDING_DEFAULTS, **config.TABLE_DEFAULTS}
    rows = _table_after(CONFIGURATION, "<!-- topic-keys-table -->")
    keys = [_code_names(row[0])[0] for row in rows]
    unknown = set(keys) - set(defaults)
    assert not unknown, f"docs/configuration.md documents {sorted(unknown)}, which topics/config.py does not know"
    for key, row in zip(keys, rows):
        assert _code_names(row[1])[:1] == [_doc_value(defaults[key])], f"{key}: default {row[1]!r}"


# --- links ----------------------------------------------------------------------------------------------

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    return {_anchor(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, re.M)}


def _links(path: Path) -> list[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    text = re.sub(r"`[^`\n]*`", "", text)  # code spans are not links
    return LINK.findall(text)


@pytest.mark.parametrize("doc", _documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_to_a_file_that_exists(doc):
    broken = []
    for target in _links(doc):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (doc.parent / file_part).resolve() if file_part else doc
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{target}: no heading with that anchor in {dest.relative_to(ROOT)}")
    assert not broken, f"{doc.relative_to(ROOT)}: " + "; ".join(broken)


def test_the_link_scan_sees_links():
    assert len(_links(ROOT / "README.md")) >= 5


# --- the command line -----------------------------------------------------------------------------------


def cli_commands_and_options() -> set[str]:
    """The commands and sub-commands of the CLI and their long options (`--x`), walked from its click group."""
    import click

    from compaction_assets.cli import COMPACTION

    found: set[str] = set()
    pending: list[click.Command] = [COMPACTION]
    while pending:
        command = pending.pop()
        found.update(flag for param in command.params for flag in param.opts if flag.startswith("--"))
        if isinstance(command, click.Group):
            found.update(command.commands)
            pending.extend(command.commands.values())
    return found


def test_docs_cli_names_every_command_and_option():
    names = cli_commands_and_options()
    assert {"clean", "ingest", "commit", "--store", "--landing", "--as-of"} <= names, "the walk must see the CLI"
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    missing = sorted(n for n in names if not re.search(r"`[^`]*(?<![\w-])" + re.escape(n) + r"(?![\w-])", text))
    assert not missing, f"docs/cli.md does not mention {missing}"


# --- the front door -------------------------------------------------------------------------------------


def test_the_readme_is_a_front_door():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move detail into docs/"

"""docs/connectors.md stays copy-pasteable and true: every topic configuration block is a topics file the
product accepts (through `load_topics`, as `compaction config apply` reads one), every connector settings
block is plain `key=value` lines, and where a block of connector settings names the fields InsertField
adds, the topic configuration after it names the same ones."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from compaction_assets.topics.config import load_topics

DOC = Path(__file__).resolve().parents[3] / "docs" / "connectors.md"
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)
SECTION = re.compile(r"^## (.+)$", re.M)
LANDING_OF_SECTION = {"Confluent": "confluent", "Aiven": "aiven", "Lenses": "lenses"}


def blocks() -> list[tuple[str, str, str]]:
    """(section heading, language, text) of every fenced block, in order."""
    text = DOC.read_text(encoding="utf-8")
    heads = [(m.start(), m.group(1)) for m in SECTION.finditer(text)]
    out = []
    for m in BLOCK.finditer(text):
        section = [h for pos, h in heads if pos < m.start()]
        out.append((section[-1] if section else "", m.group(1), m.group(2)))
    return out


def properties(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line.strip() and not line.startswith("#"))


YAML = [(s, t) for s, lang, t in blocks() if lang == "yaml"]
PROPERTIES = [(s, t) for s, lang, t in blocks() if lang == "properties"]


def test_the_doc_has_blocks_for_every_connector():
    sections = {s.split(" ")[0] for s, _ in YAML}
    assert {"Confluent", "Aiven", "Lenses", "Debezium"} <= sections
    assert len(YAML) >= 9 and len(PROPERTIES) >= 8


@pytest.mark.parametrize("section, text", YAML, ids=[f"yaml{i}" for i in range(len(YAML))])
def test_every_topic_configuration_is_accepted_by_the_product(tmp_path, section, text):
    path = tmp_path / "topics.yaml"
    path.write_text(text, encoding="utf-8")
    topics = load_topics(path)  # validates every topic, one-line ConfigError otherwise
    assert topics.topics
    for name in topics.topics:
        landing = topics.config_for(name).landing
        wanted = LANDING_OF_SECTION.get(section.split(" ")[0])
        assert wanted is None or landing.format.value == wanted, (section, name)


@pytest.mark.parametrize("section, text", PROPERTIES, ids=[f"properties{i}" for i in range(len(PROPERTIES))])
def test_every_connector_block_is_plain_key_value_lines(section, text):
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        assert sep and re.fullmatch(r"[A-Za-z0-9_.$-]+", key), line
        assert " #" not in value and value == value.strip(), f"not copy-pasteable (a '#' or blank in the value): {line}"


def test_insert_field_names_match_the_topic_configuration_after_them():
    checked = 0
    ordered = [(lang, text) for _, lang, text in blocks()]
    for i, (lang, text) in enumerate(ordered):
        props = properties(text) if lang == "properties" else {}
        inserted = {
            k.rsplit(".", 2)[-2]: v for k, v in props.items() if k.endswith((".offset.field", ".timestamp.field"))
        }
        if not inserted:
            continue
        following = next(t for lang2, t in ordered[i + 1 :] if lang2 == "yaml")
        for what, field in inserted.items():
            assert f"landing.{what}.field: {field}" in following, (what, field)
            checked += 1
    assert checked >= 2

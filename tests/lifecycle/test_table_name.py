"""A topic's table name: each '.' of the topic's name as '_' by default, or the topic's `table.name`, so two
topics whose names map to one table (`a.b`, `a_b`) are set apart inside one code location."""

from __future__ import annotations

import json

import pytest

from compaction_assets.cli import main
from compaction_assets.errors import ConfigError
from compaction_assets.table.catalog import TableError
from compaction_assets.table.commit.commit import commit_log
from compaction_assets.topics.config import build_config
from tests.table.helpers import CFG, put


def cli(capsys, *args) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_two_topics_mapping_to_one_table_are_set_apart_with_table_name(store, capsys):
    put(store.log("a.b-0"), {"k": "dotted"})
    put(store.log("a_b-0"), {"k": "underscored"})
    assert cli(capsys, "--store", store.location, "table", "commit", "a.b-0")[0] == 0
    code, _, err = cli(capsys, "--store", store.location, "table", "commit", "a_b-0")
    assert code == 1 and "config set a_b table.name=" in err and err.count("\n") == 1, err
    code, out, err = cli(capsys, "--store", store.location, "config", "set", "a_b", "table.name=a_b_underscored")
    assert code == 0, err
    code, out, err = cli(capsys, "--store", store.location, "table", "commit", "a_b-0")
    assert code == 0 and json.loads(out)[0]["table"] == "compaction.a_b_underscored", err
    for topic, table, value in (
        ("a.b", "compaction.a_b", "dotted"),
        ("a_b", "compaction.a_b_underscored", "underscored"),
    ):
        code, out, _ = cli(capsys, "--store", store.location, "table", "show", topic)
        assert code == 0 and json.loads(out)["table"] == table
        code, out, _ = cli(capsys, "--store", store.location, "table", "scan", topic)
        assert [json.loads(line)["value"] for line in out.splitlines()] == [value]
    # the lag reads the topic's own table too
    code, out, _ = cli(capsys, "--store", store.location, "describe", "a_b-0")
    assert json.loads(out)["table"]["lag_records"] == 0


@pytest.mark.parametrize("value", ["a.b", "", "x" * 256, "white space", 7])
def test_a_table_name_that_is_not_one_is_refused_in_one_line(store, capsys, value):
    with pytest.raises(ConfigError, match=r"table.name=.*must be 1-255 characters of A-Z a-z 0-9 _ -"):
        build_config({"table.name": value}, "users")
    if value == "":  # on the command line, `table.name=` is null: back to the name derived from the topic's
        return
    put(store.log("users-0"), {"k": "v"})
    code, _, err = cli(capsys, "--store", store.location, "config", "set", "users", f"table.name={value}")
    assert code == 1 and err.count("\n") == 1 and "table.name" in err, err


def test_table_name_is_per_topic_not_a_default():
    with pytest.raises(ConfigError, match=r"table.name is a topic's own"):
        build_config({"table.name": "shared"}, "<defaults>")


def test_a_commit_uses_the_configured_name(store):
    h = store.log("users-0")
    put(h, {"k": "v"})
    config = build_config({"table.name": "people"}, "users")
    assert commit_log(h, config).identifier == "compaction.people"
    with pytest.raises(TableError, match=r"table compaction.people holds topic 'users', not 'orders'"):
        other = store.log("orders-0")
        put(other, {"k": "v"})
        commit_log(other, config)
    assert commit_log(h, CFG).identifier == "compaction.users"

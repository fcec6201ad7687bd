"""The settings read from an environment: one declaration per variable gives its default, its parsing, its
refusal (a `ConfigError` naming variable, value and rule) and its line of docs/configuration.md."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import fields

import pytest

from compaction_assets import settings
from compaction_assets.errors import ConfigError
from compaction_assets.variables import VARIABLE, Declarations, one_of, positive_int, with_table, yes_no


def test_defaults_where_nothing_is_set():
    env = settings.current({})
    assert (env.store, env.topics_file, env.lock_ttl_seconds, env.debug) == ("var/store", None, 300.0, False)
    assert (env.jvm_quick_start, env.tables.catalog_type, env.batches.sqlite_sync) == (True, "sql", "normal")
    assert env == settings.Settings()  # the dataclasses' defaults are the declarations' defaults


def test_blank_counts_as_unset():
    assert settings.current({settings.STORE: "  ", settings.MAX_RUNS_PER_TICK: ""}) == settings.current({})


@pytest.mark.parametrize(
    ("name", "raw", "message"),
    [
        (settings.LOCK_TTL_SECONDS, "0", "COMPACTION_LOCK_TTL_SECONDS='0': must be a positive number of seconds"),
        (settings.LOCK_TTL_SECONDS, "inf", "COMPACTION_LOCK_TTL_SECONDS='inf': must be a positive number of seconds"),
        (settings.MAX_RUNS_PER_TICK, "x", "COMPACTION_MAX_RUNS_PER_TICK='x': must be a positive whole number"),
        (settings.TABLE_BUCKETS, "0", "COMPACTION_TABLE_BUCKETS='0': must be a positive whole number"),
        (settings.BATCH_SQLITE_SYNC, "off", "COMPACTION_BATCH_SQLITE_SYNC='off': must be one of normal, full"),
    ],
)
def test_a_refused_value_names_variable_value_and_rule(name, raw, message):
    with pytest.raises(ConfigError) as refused:
        settings.current({name: raw})
    assert str(refused.value) == message


def test_values_are_parsed_as_declared():
    env = settings.current(
        {
            settings.MAX_RUNS_PER_TICK: " 7 ",
            settings.BATCH_SQLITE_SYNC: " FULL ",
            settings.TABLE_CATALOG_TYPE: " Rest ",
            settings.TABLE_NAMESPACE: " ns ",
            settings.STORE: " s3://b/p ",  # a path is taken as set
        }
    )
    assert (env.max_runs_per_tick, env.batches.sqlite_sync) == (7, "full")
    assert (env.tables.catalog_type, env.tables.namespace, env.store) == ("rest", "ns", " s3://b/p ")


@pytest.mark.parametrize(
    ("raw", "own", "aws", "pyspark"),
    [
        ("0", False, False, False),
        ("no", False, False, False),
        (" False ", False, False, False),
        ("1", True, True, True),
        ("true", True, True, True),
        ("yes", True, True, False),
        ("on", True, False, False),
    ],
)
def test_one_yes_no_parser_with_each_owners_words(raw, own, aws, pyspark):
    env = settings.current(
        {settings.DEBUG: raw, settings.AWS_ALLOW_HTTP: raw, settings.SPARK_CONNECT_RELEASE_SESSION_ON_EXIT: raw}
    )
    assert (env.debug, env.object_store.allow_http, env.connect_release_on_exit) == (own, aws, pyspark)


def test_the_region_falls_back_and_secrets_stay_out_of_the_repr():
    env = settings.current({settings.AWS_DEFAULT_REGION: "eu-west-1", settings.AWS_SECRET_ACCESS_KEY: "s3cr3t"})
    assert env.object_store.region == "eu-west-1"
    assert (
        settings.current({"AWS_REGION": "us-east-2", "AWS_DEFAULT_REGION": "eu-west-1"}).object_store.region
        == "us-east-2"
    )
    assert "s3cr3t" not in repr(env)


def test_every_field_reads_a_declared_variable():
    def variables_of(cls) -> list[str]:
        found = []
        for item in fields(cls):
            found += variables_of(item.default_factory) if VARIABLE not in item.metadata else [item.metadata[VARIABLE]]
        return found

    read = variables_of(settings.Settings)
    assert len(read) == len(set(read)) and set(read) <= set(settings.ENVIRONMENT.variables)


def test_a_declaration_shows_its_default_in_the_table():
    declared = Declarations()
    declared.declare("A_NUMBER", "a number", default=3, parse=positive_int)
    declared.declare("A_FLAG", "a flag", default=True, parse=yes_no())
    declared.declare("A_MODE", "a mode", default="x", parse=one_of("x", "y"), shown_as="`x` (the first)")
    declared.declare("A_PATH", "a path")
    assert declared.markdown_table().splitlines()[2:] == [
        "| `A_NUMBER` | `3` | a number |",
        "| `A_FLAG` | on | a flag |",
        "| `A_MODE` | `x` (the first) | a mode |",
        "| `A_PATH` | unset | a path |",
    ]


def test_the_docs_command_rewrites_the_table(tmp_path):
    table = "| variable | default | meaning |\n|---|---|---|\n| `OLD` | x | y |\n"
    stale = f"# Doc\n\n<!-- environment-table -->\n{table}\nAfter.\n"
    path = tmp_path / "configuration.md"
    path.write_text(stale, encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "compaction_assets.settings", "--docs", str(path)], check=False)
    assert done.returncode == 0
    assert path.read_text(encoding="utf-8") == with_table(stale, settings.ENVIRONMENT.markdown_table())
    assert "`OLD`" not in path.read_text(encoding="utf-8") and path.read_text(encoding="utf-8").endswith("\n\nAfter.\n")

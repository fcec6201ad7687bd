"""An ingestion's IngestReport and the document users see of it: the CLI's `ingest` JSON and the Dagster
metadata keep their keys, order and presence rules (connector-only keys, `timestamp_source` when used)."""

from __future__ import annotations

import json
import os

import pytest

from compaction_assets import cli
from compaction_assets.ingest.landing import ingest, landing_logs
from compaction_assets.ingest.route import NOT_OFFERED
from compaction_assets.topics.config import build_config
from tests.log.connectors.sinks import confluent_name, write_lines

MTIME_SOURCE = "the objects' modification time for records without a timestamp field (landing.timestamp.field)"


@pytest.fixture
def landing(tmp_path):
    """A native topic (one record of a.jsonl has no key: invalid) and a Confluent JSON topic of two gap-free
    files without a timestamp field, whose files' mtimes stamp their records."""
    native = tmp_path / "landing" / "orders" / "partition=0"
    write_lines(
        native / "a.jsonl", [{"key": "k1", "value": "v", "timestamp": 5}, {"key": None, "value": "x", "timestamp": 6}]
    )
    write_lines(native / "b.jsonl", [{"key": "k2", "value": None, "timestamp": 7}])
    part = tmp_path / "landing" / "users" / "partition=0"
    for start, ids in ((0, [1, 2, 1]), (3, [2, 3])):
        write_lines(part / confluent_name("users", 0, start, ext="json"), [{"id": i, "email": f"{i}@x"} for i in ids])
        write_lines(part / confluent_name("users", 0, start, ".keys", "json"), [{"id": i} for i in ids])
        os.utime(part / confluent_name("users", 0, start, ext="json"), (1000 + start, 1000 + start))
    return tmp_path / "landing"


NATIVE_DOCUMENT = {
    "files_ingested": 2,
    "records_appended": 2,
    "invalid_records_dropped": 1,
    "files": ["a.jsonl", "b.jsonl"],
    "path": "in-process",
    "why": NOT_OFFERED.why,
}
CONNECTOR_DOCUMENT = {
    "files_ingested": 4,
    "records_appended": 5,
    "invalid_records_dropped": 0,
    "files": [
        confluent_name("users", 0, 0, ext="json"),
        confluent_name("users", 0, 0, ".keys", "json"),
        confluent_name("users", 0, 3, ext="json"),
        confluent_name("users", 0, 3, ".keys", "json"),
    ],
    "path": "in-process",
    "why": NOT_OFFERED.why,
    "timestamps_from_mtime": 5,
    "offsets_inferred": [confluent_name("users", 0, 3, ext="json")],
    "timestamp_source": MTIME_SOURCE,
}


def test_a_native_ingestion_reports_the_four_native_keys(landing, store):
    report = ingest(store.log("orders-0"), build_config({}), landing_logs(landing)[0]["orders-0"], drop_invalid=True)
    assert (report.files_ingested, report.records_appended, report.invalid_records_dropped) == (2, 2, 1)
    assert not report.connector_layout and report.timestamp_source is None
    document = report.as_document()
    assert document == NATIVE_DOCUMENT and list(document) == list(NATIVE_DOCUMENT)  # same keys, same order


def test_a_connector_ingestion_adds_its_keys_and_names_the_mtime_source(landing, store):
    report = ingest(
        store.log("users-0"), build_config({"landing.format": "confluent"}), landing_logs(landing)[0]["users-0"]
    )
    assert report.connector_layout and report.offsets_inferred == (confluent_name("users", 0, 3, ext="json"),)
    document = report.as_document()
    assert document == CONNECTOR_DOCUMENT and list(document) == list(CONNECTOR_DOCUMENT)
    again = ingest(
        store.log("users-0"), build_config({"landing.format": "confluent"}), landing_logs(landing)[0]["users-0"]
    ).as_document()
    # nothing new: the connector keys stay, the timestamps' source is named only when some came from mtime
    assert again == {
        "files_ingested": 0,
        "records_appended": 0,
        "invalid_records_dropped": 0,
        "files": [],
        "path": "in-process",
        "why": NOT_OFFERED.why,
        "timestamps_from_mtime": 0,
        "offsets_inferred": [],
    }


def test_the_cli_prints_each_logs_document_byte_for_byte(landing, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COMPACTION_MEMORY_BUDGET", str(64 << 20))
    topics = tmp_path / "topics.yaml"
    topics.write_text("topics: {users: {landing.format: confluent}}\n")
    capsys.readouterr()
    rc = cli.main(
        [
            "--store",
            str(tmp_path / "store"),
            "--topics",
            str(topics),
            "ingest",
            "--landing",
            str(landing),
            "--drop-invalid",
        ]
    )
    out, err = capsys.readouterr()
    assert rc == 0, err
    # each document ends with what its topic's table commit did (snapshot ids differ from run to run): the
    # ingestion's own part, before it, is the same byte for byte
    printed = json.loads(out)
    assert [printed[log].pop("table")["committed"] for log in printed] == [True, True]
    # the CLI offers Spark: each backlog is within the budget, so read in this process, as the route says
    within = "is within COMPACTION_MEMORY_BUDGET (64 MiB): read and shaped in this process"
    assert all(within in printed[log].pop("why") for log in printed)
    expected = {
        log: {k: v for k, v in document.items() if k != "why"}
        for log, document in (("orders-0", NATIVE_DOCUMENT), ("users-0", CONNECTOR_DOCUMENT))
    }
    assert json.dumps(printed, indent=2) == json.dumps(expected, indent=2)

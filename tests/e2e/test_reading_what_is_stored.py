"""Reading what is stored (issue 57): `table scan --limit` keeps the order docs/cli.md promises (partition,
then key); bytes print one documented way in `read`, `latest-state` and `table scan` (text when they are
printable UTF-8, else base64; the topic's version header as its number) and read back with `append`; every
command's --help shows an example."""

from __future__ import annotations

import base64
import json

import click

from compaction_assets.cli import COMPACTION
from compaction_assets.log.reader import iter_records
from compaction_assets.store.log_store import LogStore
from tests.e2e.test_operator_safety import run, write_jsonl


def test_table_scan_limit_keeps_the_order_by_partition_and_key(tmp_path, capsys):
    store = str(tmp_path / "store")
    # partition 0 in two commits (two data files), keys falling, then partition 1: the order of the table's
    # files (a scan reads the newest first) is not the order promised
    for n, (log, keys) in enumerate((("users-0", ["z", "y"]), ("users-0", ["x", "w"]), ("users-1", ["b", "a"]))):
        data = write_jsonl(tmp_path / f"{n}.jsonl", [{"key": k, "value": "v", "timestamp": 1} for k in keys])
        assert run(capsys, "--store", store, "append", log, str(data))[0] == 0
    rc, out, err = run(capsys, "--store", store, "table", "scan", "users", "--limit", "3")
    assert rc == 0, err
    assert [(r["partition"], r["key"]) for r in map(json.loads, out.splitlines())] == [(0, "w"), (0, "x"), (0, "y")]
    rc, out, err = run(capsys, "--store", store, "table", "scan", "users", "--limit", "5")
    assert [(r["partition"], r["key"]) for r in map(json.loads, out.splitlines())] == [
        (0, "w"),
        (0, "x"),
        (0, "y"),
        (0, "z"),
        (1, "a"),
    ]
    rc, out, err = run(capsys, "--store", store, "table", "scan", "users", "--limit", "-1")
    assert rc == 1 and "--limit -1: must be 0 or more" in err


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def test_bytes_print_one_documented_way_everywhere(tmp_path, capsys):
    store = str(tmp_path / "store")
    rc, _, err = run(
        capsys,
        "--store",
        store,
        "config",
        "set",
        "cdc",
        "compaction.strategy=header",
        "compaction.strategy.header=version",
    )
    assert rc == 0, err
    record = {
        "key_b64": _b64(b"k\x00"),  # UTF-8, but not printable: base64
        "value": "caf\u00e9",  # printable UTF-8: text
        "timestamp": 5,
        "headers": [
            ["version", 7],  # the topic's version header: its number
            ["trace", "\u0000\u0001"],  # UTF-8, but control characters: base64
            ["source", "app"],  # text
            ["raw", {"b64": _b64(b"\xff\xfe")}],  # not UTF-8: base64
        ],
    }
    data = write_jsonl(tmp_path / "in.jsonl", [record])
    assert run(capsys, "--store", store, "append", "cdc-0", str(data))[0] == 0
    headers = [
        ["version", 7],
        ["trace", {"b64": _b64(b"\x00\x01")}],
        ["source", "app"],
        ["raw", {"b64": _b64(b"\xff\xfe")}],
    ]

    rc, out, err = run(capsys, "--store", store, "read", "cdc-0")
    assert rc == 0, err
    assert json.loads(out) == {
        "offset": 0,
        "key_b64": _b64(b"k\x00"),
        "value": "caf\u00e9",
        "timestamp": 5,
        "headers": headers,
    }
    rc, out, err = run(capsys, "--store", store, "latest-state", "cdc-0")
    assert json.loads(out) == {"key_b64": _b64(b"k\x00"), "value": "caf\u00e9", "offset": 0}
    rc, out, err = run(capsys, "--store", store, "table", "scan", "cdc")
    assert rc == 0, err
    row = json.loads(out)
    assert (row["key_b64"], row["value"], row["headers"]) == (_b64(b"k\x00"), "caf\u00e9", headers), row
    assert "key" not in row

    # what `read` printed is what `append` reads: the same record, byte for byte
    rc, out, err = run(capsys, "--store", store, "read", "cdc-0")
    copy = tmp_path / "copy.jsonl"
    copy.write_text(out)
    assert run(capsys, "--store", store, "append", "cdc-1", str(copy))[0] == 0
    original, copied = (list(iter_records(LogStore(store).log(log))) for log in ("cdc-0", "cdc-1"))
    assert [(r.key, r.value, r.timestamp, r.headers) for r in copied] == [
        (r.key, r.value, r.timestamp, r.headers) for r in original
    ]


def _commands(group: click.Group, path: tuple[str, ...] = ()):
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from _commands(command, (*path, name))
        else:
            yield (*path, name)


def test_every_commands_help_shows_an_example(capsys):
    from compaction_assets import cli

    missing = []
    for path in _commands(COMPACTION):
        capsys.readouterr()
        assert cli.main([*path, "--help"]) == 0
        shown = capsys.readouterr().out
        if "Example" not in shown or f"compaction {' '.join(path)}" not in shown.split("Example", 1)[1]:
            missing.append(" ".join(path))
    assert missing == [], f"--help without an example: {missing}"

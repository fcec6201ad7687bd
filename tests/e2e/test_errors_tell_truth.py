"""Errors that tell the truth (issue 57): a full disk during a cleaning is the machine's fault, not the log's
(not marked, said so, and what the cleaning wrote is removed); a store that is a file, a read-only store and a
missing input file are refused in one line that names what is wrong, and no error a user can cause reads
"unexpected". The disk and the read-only store are real: small tmpfs mounts (root only; skipped elsewhere)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from compaction_assets.store.log_store import LogStore
from tests.e2e.test_operator_safety import errors, run, write_jsonl


@contextmanager
def tmpfs(where: Path, size: str) -> Iterator[Path]:
    """A real, small filesystem mounted at `where` for the block (skips the test where mounting is not allowed)."""
    where.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def _fill(disk: Path, leave_kb: int) -> Path:
    """A file that takes all of `disk`'s free space but `leave_kb` KiB."""
    stats = os.statvfs(disk)
    free = stats.f_bavail * stats.f_frsize
    filler = disk / "filler"
    with open(filler, "wb") as fh:
        fh.truncate(0)
        fh.write(b"\0" * max(0, free - leave_kb * 1024))
    return filler


def _distinct_records(path: Path, records: int, keys: int) -> Path:
    """Records whose values do not compress (so that a cleaning's output is as large as what it keeps)."""
    return write_jsonl(
        path,
        [{"key": f"k{i % keys}", "value": os.urandom(50).hex(), "timestamp": 1000 + i} for i in range(records)],
    )


def test_a_full_disk_during_a_cleaning_is_not_the_logs_fault_and_leaves_nothing_behind(tmp_path, capsys):
    with tmpfs(tmp_path / "disk", "8m") as disk:
        store = str(disk / "store")
        data = _distinct_records(tmp_path / "in.jsonl", 20000, 3000)  # 85% superseded: the segment is rewritten
        assert run(capsys, "--store", store, "append", "t-0", str(data), "--no-table")[0] == 0
        assert run(capsys, "--store", store, "roll", "t-0", "--no-table")[0] == 0
        filler = _fill(disk, leave_kb=100)  # the cleaning's output (~250 KiB) does not fit
        rc, out, err = run(capsys, "--store", store, "clean", "t-0", "--no-table")
        assert rc == 75, err  # transient: free space and run again
        assert out == ""
        lines = errors(err)
        assert "No space left on device" in lines[0] and "disk is full" in lines[0], lines
        assert "not marked" in lines[0] and "marked uncleanable" not in err, lines
        log = LogStore(store).log("t-0")
        assert log.manifest().uncleanable is None, "a full disk must not mark the log"
        left = sorted(str(p.relative_to(disk)) for p in (disk / "store" / "t-0").rglob("*") if p.is_file())
        assert not [p for p in left if "/data/clean-" in p or "/side/" in p or "/.tmp-" in p], left
        filler.unlink()  # space again: the same cleaning runs
        rc, out, err = run(capsys, "--store", store, "clean", "t-0", "--no-table")
        assert rc == 0, err
        assert json.loads(out)[0]["stats"]["records_written"] == 3000


def test_a_cleaning_that_only_marks_records_leaves_no_empty_work_folder(tmp_path, capsys):
    store = str(tmp_path / "store")
    data = _distinct_records(tmp_path / "in.jsonl", 2000, 1500)  # few superseded: marked, not rewritten
    assert run(capsys, "--store", store, "append", "t-0", str(data), "--no-table")[0] == 0
    assert run(capsys, "--store", store, "roll", "t-0", "--no-table")[0] == 0
    rc, out, err = run(capsys, "--store", store, "clean", "t-0", "--no-table")
    assert rc == 0, err
    assert json.loads(out)[0]["stats"]["segments_marked"] == 1
    assert not list((tmp_path / "store" / "t-0" / "data").glob("clean-*"))


def test_a_store_that_is_a_file_is_named_as_such(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("not a store\n")
    data = write_jsonl(tmp_path / "in.jsonl", [{"key": "a", "value": "1", "timestamp": 1}])
    for args in (("logs",), ("append", "t-0", str(data))):
        rc, out, err = run(capsys, "--store", str(afile), *args)
        assert rc == 1 and out == "", err
        assert errors(err) == [err.strip()], err
        assert "is a file, not a folder" in err and "does not exist" not in err and "unexpected" not in err, err


def test_a_read_only_store_is_refused_in_one_line(tmp_path, capsys):
    with tmpfs(tmp_path / "ro", "4m") as disk:
        store = str(disk / "store")
        data = write_jsonl(tmp_path / "in.jsonl", [{"key": "a", "value": "1", "timestamp": 1}])
        assert run(capsys, "--store", store, "append", "t-0", str(data), "--no-table")[0] == 0
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        for args in (
            ("append", "t-0", str(data)),
            ("clean", "t-0", "--force"),
            ("roll", "t-0"),
            ("gc", "t-0"),
            ("config", "set", "t", "min.cleanable.dirty.ratio=0.3"),
        ):
            rc, out, err = (
                run(capsys, "--store", store, *args, "--no-table")
                if args[0]
                in (
                    "append",
                    "clean",
                    "roll",
                )
                else run(capsys, "--store", store, *args)
            )
            assert rc == 1, (args, err)
            assert len(errors(err)) == 1, (args, err)
            assert "unexpected" not in err and "read-only" in err, (args, err)
            assert "_locks/.tmp-" not in err, (args, err)  # the store is named, not a writer's temporary file
        rc, out, err = run(capsys, "--store", store, "describe", "t-0")  # reading still works
        assert rc == 0, err
        assert json.loads(out)["log_end_offset"] == 1


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl", ".avro"])
def test_a_missing_input_file_says_so_whatever_its_format(tmp_path, capsys, suffix):
    missing = tmp_path / f"missing{suffix}"
    rc, out, err = run(capsys, "--store", str(tmp_path / "store"), "append", "t-0", str(missing))
    assert rc == 1 and out == ""
    assert errors(err) == [f"error: {missing}: cannot read (No such file or directory)"], err


def test_no_error_a_user_can_cause_says_unexpected():
    """The catch-all is for the product's own bugs: an operating system error (a path, a permission, a full
    disk) has its own one-line form."""
    from compaction_assets.errors import os_error_message

    assert os_error_message(FileNotFoundError(2, "No such file or directory", "/x/y")) == (
        "/x/y: No such file or directory"
    )
    assert "read-only" in os_error_message(OSError(30, "Read-only file system", "/s/t-0/_locks/a"))
    assert "disk is full" in os_error_message(OSError(28, "No space left on device", "/s/t-0/data/f"))


def test_a_write_that_fills_the_disk_leaves_no_temporary_file(tmp_path):
    from compaction_assets.store import local_files

    with tmpfs(tmp_path / "disk", "1m") as disk:
        _fill(disk, leave_kb=0)
        with pytest.raises(OSError) as raised:
            local_files.write_atomic(str(disk / "manifest.json"), b"x" * 200_000)
        assert raised.value.errno == 28
        assert [p.name for p in disk.iterdir()] == ["filler"]

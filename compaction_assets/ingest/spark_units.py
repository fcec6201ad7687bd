"""A backlog's units read and shaped in Spark tasks, handed back to the ingestion in unit order.

The ingestion commits each unit on the driver exactly as it does in this process (landing.py): the same
append, under the same recorded name, all or nothing. Only where a unit is read and shaped differs: each
task calls the same function the in-process path calls (`native_reads.read_file`, `ingest.build`) and writes
what it returns, pickled, into a stage folder of the log (`data/stage-ingest-<id>/`); only the files' paths
come back to the driver, which reads them one at a time, in order, so that its memory holds one unit (and
the next window's paths), never the backlog. A unit's refusal is staged like its records and raised when
its turn comes, after the units before it are committed.

The units go to Spark a window at a time (a few per core): the next window's job runs in a thread
(log/read_ahead.py) while this one's units are committed, so the stage holds at most two windows. Nothing
staged is referenced by the log: leaving (a refusal, a fault, the end) deletes the stage folder, and a
stage left by a process that died is unreferenced under data/, which the garbage collection removes. A
fault of a task (the engine, the machine) fails the Spark job, so the ingestion fails and its rerun
finishes what is pending.

The tasks import the product: its package is sent to the workers with the job (`_ship_package`).
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import tempfile
import uuid
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from compaction_assets.errors import InvalidInputError
from compaction_assets.log.read_ahead import ReadAhead
from compaction_assets.store.fs import Storage
from compaction_assets.store.log_store import LogHandle

Item = TypeVar("Item")
RESULT_SCHEMA = "item long, path string"
UNITS_PER_CORE = 2  # a window's units per core of the session: each core has a next unit while one is slow
STAGE_PREFIX = "data/stage-ingest-"
_SHIPPED_TO: set[int] = set()  # the sessions (by id) the package was sent to


@dataclass(frozen=True)
class Refusal:
    """A unit's InvalidInputError, as a task stages it (an exception's own pickling loses `row`)."""

    message: str
    row: int | None

    def error(self) -> InvalidInputError:
        return InvalidInputError(self.message, row=self.row)


def planned(items: Iterator[Any]) -> list[Any]:
    """The items a plan yields, listed for the windows; a refusal while planning (a file that vanished, read
    for the plan) ends the list as a Refusal, raised in its turn, after the items before it are committed,
    as the plan read lazily in this process raises it."""
    out: list[Any] = []
    try:
        out.extend(items)
    except InvalidInputError as exc:
        out.append(Refusal(str(exc), exc.row))
    return out


def _location(storage: Storage) -> str:
    """What opens `storage` again in a worker: a local folder's absolute root, an object store's URI."""
    return storage.root if storage.local else storage.location


def _stage_task(landing: str, src: Any, store: str, stage: str, work: dict[int, Any], build: Callable) -> Callable:
    """The function for `mapInArrow` over the window's item numbers: each item built by `build(src, item)`
    and staged at `<stage>/<item>.pickle` of the log store; yields (item, path)."""

    def run(batches):
        import pyarrow as pa

        source = dataclasses.replace(src, storage=Storage.open(landing))
        target = Storage.open(store).fs
        target.create_dir(stage, recursive=True)
        for batch in batches:
            for number in batch.column(0).to_pylist():
                if number not in work:
                    continue
                try:
                    result = build(source, work[number])
                except InvalidInputError as exc:  # the log's data: refused in order by the driver
                    result = Refusal(str(exc), exc.row)
                path = f"{stage}/{number:09d}.pickle"
                with target.open_output_stream(path) as out:  # not synced: a staged unit lost is built again
                    pickle.dump(result, out, protocol=5)
                del result
                yield pa.RecordBatch.from_pylist([{"item": number, "path": path}])

    return run


class SparkBuilt(Generic[Item]):
    """Iterate what `build(src, item)` gives for each of `items`, in order, built in Spark tasks (items for
    which `here(item)` is true are given as they are, for the caller to read in this process). Use as a
    context manager, as ReadAhead: leaving it stops the next window and deletes the stage. A staged
    refusal is raised at its item."""

    def __init__(
        self,
        spark: Any,
        handle: LogHandle,
        src: Any,
        items: list[Any],
        build: Callable[[Any, Any], Item],
        here: Callable[[Any], bool] = lambda item: False,
    ):
        self._spark, self._handle, self._src, self._items = spark, handle, src, items
        self._build = build
        self._here = lambda item: isinstance(item, Refusal) or here(item)  # a plan's refusal is raised here
        self._stage = handle.path(f"{STAGE_PREFIX}{uuid.uuid4().hex}")
        self._windows = ReadAhead(self._jobs())

    def __enter__(self) -> SparkBuilt[Item]:
        self._windows.__enter__()
        return self

    def __exit__(self, *exc_info) -> None:
        try:
            self._windows.__exit__(*exc_info)
        finally:
            self._handle.st.delete(self._stage)

    def __iter__(self) -> Iterator[Any]:
        for window in self._windows:
            for number, path in window:
                if path is None:
                    item = self._items[number]
                    if isinstance(item, Refusal):
                        raise item.error()
                    yield item
                    continue
                with self._handle.st.fs.open_input_file(path) as staged:
                    result = pickle.load(staged)
                self._handle.st.delete(path)
                if isinstance(result, Refusal):
                    raise result.error()
                yield result
                del result  # not held while the next unit is read

    def _jobs(self) -> Iterator[list[tuple[int, str | None]]]:
        """Each window's (item number, staged path; None: read here), its Spark job run when it is produced."""
        size = max(2, UNITS_PER_CORE * _parallelism(self._spark))
        for first in range(0, len(self._items), size):
            numbers = range(first, min(first + size, len(self._items)))
            work = {n: self._items[n] for n in numbers if not self._here(self._items[n])}
            staged = self._run(numbers, work) if work else {}
            yield [(n, staged.get(n)) for n in numbers]

    def _run(self, numbers: range, work: dict[int, Any]) -> dict[int, str]:
        """One window's Spark job, a task per item (an item read here makes an idle task): the staged paths
        by item number."""
        _ship_package(self._spark)
        portable = dataclasses.replace(self._src, storage=None)
        run = _stage_task(
            _location(self._src.storage), portable, _location(self._handle.st), self._stage, work, self._build
        )
        tasks = self._spark.range(numbers.start, numbers.stop, 1, len(numbers))
        rows = tasks.mapInArrow(run, RESULT_SCHEMA).collect()
        return {int(row["item"]): str(row["path"]) for row in rows}


def _parallelism(spark: Any) -> int:
    """The cores Spark runs tasks on (a Spark Connect session has no SparkContext: two, a small server's)."""
    try:
        return int(spark.sparkContext.defaultParallelism)
    except Exception:  # Spark Connect refuses sparkContext: the window is sized for two
        return 2


def _ship_package(spark: Any) -> None:
    """Send this package to the session's Python workers once (a zip on their path), so that a task runs
    the same code as this process whether or not the workers have it installed."""
    if id(spark) in _SHIPPED_TO:
        return
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the package's folder
    archive = os.path.join(tempfile.mkdtemp(prefix="compaction-ship-"), "compaction_assets.zip")
    with zipfile.ZipFile(archive, "w") as zf:
        for folder, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for name in files:
                if not name.endswith((".pyc", ".pyo")):
                    full = os.path.join(folder, name)
                    zf.write(full, os.path.relpath(full, os.path.dirname(root)))
    try:
        spark.sparkContext.addPyFile(archive)
    except Exception:  # Spark Connect has no SparkContext: its artifacts instead
        spark.addArtifacts(archive, pyfile=True)
    _SHIPPED_TO.add(id(spark))

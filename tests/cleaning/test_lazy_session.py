"""A cleaning starts Spark only when one of its paths needs it (compaction_assets/spark/lazy_session.py): the
offset strategy decided and written in this process starts none, the timestamp strategy starts one; the
master is known from the settings (a Connect server on loopback only when it answers), and a session that
cannot start fails the cleaning as the engine's fault, tried once."""

from __future__ import annotations

import socket

import pytest

from compaction_assets.cleaning import engine
from compaction_assets.errors import EngineError
from compaction_assets.log import writer
from compaction_assets.spark.lazy_session import LOOPBACK_CONNECT_MASTER, LazySession, master_named_by, started_session
from tests.cleaning.test_small_and_large_paths import NOW, _build, _segments


def _counting(spark, starts: list):
    """The test's session, handed out by a function that counts how often the cleaning asks for it."""

    def start():
        starts.append(1)
        return spark

    return start


def test_a_cleaning_decided_here_starts_no_session_and_cleans_as_with_one(spark, tmp_path, make_config):
    from compaction_assets.store.log_store import LogStore

    logs = {}
    for name, given in (("lazy", None), ("eager", spark)):
        log, cfg = _build(LogStore(str(tmp_path / name), gc_grace_s=0), make_config, "offset")
        starts: list = []
        report = engine.run(log, cfg, NOW, spark=_counting(spark, starts) if given is None else given, force=True)
        writer.append(log, cfg, [{"key": "k001", "value": "new", "timestamp": 9000}])
        writer.roll(log)
        again = engine.run(log, cfg, NOW + 1, spark=_counting(spark, starts) if given is None else given, force=True)
        assert report.cleaned and again.cleaned and report.route.decision == "local"
        logs[name] = (_segments(log), report.stats.records_written, starts)
    assert logs["lazy"][2] == []  # neither the full nor the incremental cleaning started Spark
    assert logs["lazy"][:2] == logs["eager"][:2]
    # a fleet, as `clean --all` runs it: no session either
    fleet_starts: list = []
    log, cfg = _build(LogStore(str(tmp_path / "fleet"), gc_grace_s=0), make_config, "offset")
    results = engine.run_many([(log, cfg)], NOW, spark=_counting(spark, fleet_starts), force=True)
    assert results[0].report.cleaned and fleet_starts == []


def test_the_timestamp_strategy_starts_its_session_once(spark, store, make_config):
    log, cfg = _build(store, make_config, "timestamp")
    starts: list = []
    assert engine.run(log, cfg, NOW, spark=_counting(spark, starts), force=True).cleaned
    assert starts == [1]


def test_the_master_is_known_from_the_settings_without_a_session():
    assert master_named_by({"spark.master": "local[3]"}) == "local[3]"
    assert master_named_by({"spark.master": "spark://10.0.0.5:7077"}) == "spark://10.0.0.5:7077"
    listening = socket.create_server(("127.0.0.1", 0))
    port = listening.getsockname()[1]
    try:  # a Connect server that answers on loopback runs on this machine
        assert master_named_by({"spark.remote": f"sc://127.0.0.1:{port}"}) == LOOPBACK_CONNECT_MASTER
        assert master_named_by({"spark.remote": f"sc://localhost:{port}/;use_ssl=false"}) == LOOPBACK_CONNECT_MASTER
    finally:
        listening.close()
    # one that does not answer: only its session could tell (and it fails as the engine's fault)
    assert master_named_by({"spark.remote": f"sc://127.0.0.1:{port}"}) is None
    # a server elsewhere: asked through its session, no connection tried here
    assert master_named_by({"spark.remote": "sc://spark.example.invalid:15002"}) is None
    assert master_named_by({"spark.remote": "sc://10.1.2.3:15002"}) is None


def test_a_session_that_cannot_start_is_tried_once(spark):
    tries: list = []

    def start():
        tries.append(1)
        raise EngineError("Spark Connect endpoint 127.0.0.1:1 is unreachable")

    lazy = LazySession(start, "local[2]")
    assert lazy.known_master == "local[2]" and not lazy.started and started_session(lazy) is None
    for _ in range(2):
        with pytest.raises(EngineError, match="unreachable"):
            lazy.range(1)
    assert tries == [1]
    # a started one stands for the session itself
    started = LazySession(lambda: spark)
    assert started.range(3).count() == 3 and started_session(started) is spark
    assert started.known_master == spark.conf.get("spark.master")

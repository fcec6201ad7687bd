"""What this process may take: the machine's available memory within its container's limit and the process's
memory budget, and the latest state built here, and a table commit's state, while they fit
(cleaning/decide/placement.py, state/latest_state.py, table/commit/route.py)."""

from __future__ import annotations

from compaction_assets.cleaning.decide.placement import (
    _container_headroom,
    _machine_available,
    available_memory,
    in_process_memory,
    memory_budget,
    total_memory,
)
from compaction_assets.log import writer
from compaction_assets.state.latest_state import HELD_PER_VISIBLE_BYTE, fits_in_process
from compaction_assets.table.commit.route import state_route

GIB = 1 << 30


def _cgroup(root, files: dict[str, str]):
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return str(root)


def test_a_container_limit_bounds_the_memory_available(tmp_path):
    # cgroup v2: 2 GiB limit, 1.5 GiB charged of which 1 GiB is reclaimable file pages
    v2 = _cgroup(
        tmp_path / "v2",
        {
            "memory.max": f"{2 * GIB}\n",
            "memory.current": f"{GIB + GIB // 2}\n",
            "memory.stat": f"anon 123\ninactive_file {GIB}\nactive_file 7\n",
        },
    )
    assert _container_headroom(v2) == 2 * GIB - GIB // 2
    assert available_memory(v2) == min(_machine_available(), 2 * GIB - GIB // 2)
    # cgroup v1: the same figures under memory/, the file pages as total_inactive_file
    v1 = _cgroup(
        tmp_path / "v1",
        {
            "memory/memory.limit_in_bytes": f"{GIB}\n",
            "memory/memory.usage_in_bytes": f"{3 * GIB}\n",
            "memory/memory.stat": f"inactive_file 5\ntotal_inactive_file {GIB // 2}\n",
        },
    )
    assert _container_headroom(v1) == 0  # over its limit: nothing to spare
    assert available_memory(v1) == 0


def test_no_container_limit_leaves_the_machine_available(tmp_path):
    unlimited_v2 = _cgroup(tmp_path / "v2", {"memory.max": "max\n", "memory.current": "100\n", "memory.stat": ""})
    unlimited_v1 = _cgroup(
        tmp_path / "v1",
        {
            "memory/memory.limit_in_bytes": "9223372036854771712\n",
            "memory/memory.usage_in_bytes": "100\n",
            "memory/memory.stat": "",
        },
    )
    for root in (unlimited_v2, unlimited_v1, str(tmp_path / "none")):
        assert _container_headroom(root) is None
        assert 0 < available_memory(root) <= _machine_available() + GIB  # MemAvailable moves between reads


def test_the_latest_state_is_built_here_while_it_fits_the_memory(store, make_config):
    cfg = make_config(segment_bytes=4000)
    log = store.log("state-0")
    writer.append(log, cfg, [{"key": f"k{i}", "value": "v" * 100, "timestamp": i} for i in range(200)])
    writer.roll(log)
    manifest = log.manifest()
    visible = manifest.total_size
    assert visible > 200 * 100
    assert fits_in_process(manifest)  # a small log: Arrow, no Spark
    assert not fits_in_process(manifest, share=0.0)  # no memory to spare: the Spark job
    needed = HELD_PER_VISIBLE_BYTE * visible / available_memory()
    assert fits_in_process(manifest, share=needed * 2)
    assert not fits_in_process(manifest, share=needed / 2)


def test_the_budget_defaults_to_a_quarter_of_the_machine_or_its_container(tmp_path, monkeypatch):
    monkeypatch.delenv("COMPACTION_MEMORY_BUDGET", raising=False)
    machine = total_memory(str(tmp_path / "none"))  # no cgroup files: the machine's memory
    assert machine > GIB and memory_budget(str(tmp_path / "none")) == machine // 4
    limited = _cgroup(tmp_path / "v2", {"memory.max": f"{2 * GIB}\n"})
    assert total_memory(limited) == min(machine, 2 * GIB) and memory_budget(limited) == min(machine, 2 * GIB) // 4
    unlimited = _cgroup(tmp_path / "v2-max", {"memory.max": "max\n"})
    assert total_memory(unlimited) == machine
    monkeypatch.setenv("COMPACTION_MEMORY_BUDGET", str(3 * GIB))
    assert memory_budget(limited) == 3 * GIB  # the setting wins over the default


def test_a_budget_set_low_caps_every_in_process_path(store, make_config, monkeypatch):
    cfg = make_config(segment_bytes=4000)
    log = store.log("state-0")
    writer.append(log, cfg, [{"key": f"k{i}", "value": "v" * 100, "timestamp": i} for i in range(200)])
    manifest = log.manifest()
    monkeypatch.delenv("COMPACTION_TABLE_MAX_STATE_BYTES", raising=False)
    monkeypatch.setenv("COMPACTION_MEMORY_BUDGET", str(HELD_PER_VISIBLE_BYTE * manifest.total_size))
    assert fits_in_process(manifest) and in_process_memory(1.0) == HELD_PER_VISIBLE_BYTE * manifest.total_size
    assert state_route(manifest).path == "in-process"  # the state's bound: a quarter of the budget
    monkeypatch.setenv("COMPACTION_MEMORY_BUDGET", str(HELD_PER_VISIBLE_BYTE * manifest.total_size - 1))
    assert not fits_in_process(manifest)  # however much memory is available: the latest state goes to Spark
    monkeypatch.setenv("COMPACTION_MEMORY_BUDGET", str(4 * manifest.total_size - 4))
    route = state_route(manifest)
    assert route.path == "spark" and "past COMPACTION_TABLE_MAX_STATE_BYTES" in route.why
    monkeypatch.setenv("COMPACTION_TABLE_MAX_STATE_BYTES", str(manifest.total_size))  # the table's own bound wins
    assert state_route(manifest).path == "in-process"

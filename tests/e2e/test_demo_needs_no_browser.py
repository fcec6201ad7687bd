"""The main job needs no browser and no root (issue 28, item 12): scripts/demo.sh (through scripts/setup.sh)
never runs apt-get for chromium, even as root on a machine without it; only scripts/setup-browser.sh, the
opt-in step scripts/test.sh runs for the UI test, installs it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _path_without_chromium(tmp_path: Path) -> str:
    """A PATH like this machine's, without chromium, and with an apt-get that only records its arguments."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for folder in ("/usr/local/bin", "/usr/bin", "/bin"):
        for entry in sorted(Path(folder).iterdir()) if os.path.isdir(folder) else []:
            target = bin_dir / entry.name
            if entry.name not in ("chromium", "apt-get") and not target.exists() and not target.is_symlink():
                target.symlink_to(entry)
    (bin_dir / "apt-get").write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "apt-get.calls"}\nexit 1\n')
    (bin_dir / "apt-get").chmod(0o755)
    return str(bin_dir)


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="the refusal to install is seen as root")
def test_demo_sh_installs_no_browser_even_as_root(tmp_path):
    env = {**os.environ, "PATH": _path_without_chromium(tmp_path)}
    proc = subprocess.run(
        ["bash", "scripts/demo.sh", "--help"], cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "python -m compaction_assets.demo" in proc.stdout
    calls = (tmp_path / "apt-get.calls").read_text() if (tmp_path / "apt-get.calls").exists() else ""
    assert calls == "", f"the demo's setup ran apt-get {calls!r}"
    assert "chromium" not in proc.stderr


def test_the_browser_step_says_why_it_cannot_install(tmp_path):
    """Without root or apt-get, scripts/setup-browser.sh records why, and the UI test skips with that reason."""
    env = {**os.environ, "PATH": _path_without_chromium(tmp_path)}
    os.unlink(Path(env["PATH"]) / "apt-get")
    unavailable = ROOT / ".venv" / ".chromium-unavailable"
    saved = unavailable.read_text() if unavailable.exists() else None
    try:
        proc = subprocess.run(
            ["bash", "scripts/setup-browser.sh"], cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 0, proc.stderr
        assert "needs root and apt-get" in unavailable.read_text()
    finally:
        if saved is None:
            unavailable.unlink(missing_ok=True)
        else:
            unavailable.write_text(saved)

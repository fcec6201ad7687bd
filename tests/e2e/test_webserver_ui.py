"""The Dagster UI end to end, on a small instance built by the demo.

A module fixture runs `python -m compaction_assets.demo --events 3000` against a temporary
DAGSTER_HOME, store, landing and latest-state folder, then `python -m tests.ui_scenes` on the same
instance (dirty-ratio observations of one log while records arrive, and a wrong cleaning of another
whose blocking check fails), then starts `dagster dev -w workspace.yaml -h 127.0.0.1 -p <free port>`
on that instance. The tests ask GraphQL for the definitions (assets, checks, sensors, schedules,
operator jobs) and the check history, and drive Debian's chromium with Playwright through the asset
graph, the schedules, the jobs, the dirty-ratio plot, a passed check and the failed one. Screenshots
are kept under the pytest tmp dir and copied to var/screenshots/ (git-ignored); the README's three crops
go to var/screenshots/docs/, from which docs/screenshots/ is copied by hand. All traffic stays on
127.0.0.1; the browser's other requests are blocked.

Needs `chromium` (Debian package) and the `playwright` Python package; scripts/setup.sh installs
both. The module skips only when chromium is missing and cannot be installed here (not root, or no
apt-get).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from compaction_assets.defs.batches.requests import decode_logs
from compaction_assets.demo import DEMO_LOGS
from tests import ui_dagster, ui_png

pytestmark = [
    pytest.mark.slow,
    pytest.mark.ci_real,
]  # the demo alone takes 1-6 minutes (Spark, 4 logs in one batch run)

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "var" / "screenshots"
DOCS_CROPS = SCREENSHOTS / "docs"  # the README's images as the test crops them: copied to docs/screenshots/
DOCS_MAX_BYTES = 300_000  # committed: kept small
ASSETS = {"raw_segments", "cleanable_range", "compacted_log", "latest_state"}
CHECKS = {"latest_value_per_key", "tombstone_retention", "offsets_and_order_preserved", "max_compaction_delay"}
SENSORS = {
    "log_discovery_sensor",
    "dirty_ratio_sensor",
    "max_compaction_lag_sensor",
    "run_failure_alert",
    "check_failure_alert",
}
SCHEDULES = {"retention_schedule", "gc_schedule", "compaction_sweep_schedule"}
OPERATOR_JOBS = {
    "clear_uncleanable_job",
    "set_checkpoint_job",
    "set_log_start_job",
    "forget_job",
    "gc_job",
    "retention_job",
    "rebuild_latest_state",
    "apply_topics_config_job",
}
CHECK_PAGE = "max_compaction_delay"  # passes on every partition, the broken one too
FAILED_CHECK = "latest_value_per_key"  # blocking: fails on the broken partition
DIRTY_LOG, BROKEN_LOG = "user-profiles-0", "user-profiles-1"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--no-proxy-server",
]
DEMO_TIMEOUT_S = 1200
UNAVAILABLE = ROOT / ".venv" / ".chromium-unavailable"  # written by scripts/setup.sh with the reason


def _chromium() -> str | None:
    path = shutil.which("chromium")
    if path is None and os.access("/usr/bin/chromium", os.X_OK):
        path = "/usr/bin/chromium"
    return path


@pytest.fixture(scope="module")
def chromium() -> str:
    """Debian's chromium (opt-in: scripts/setup-browser.sh, which scripts/test.sh runs). Outside CI a machine
    without it skips, saying why; under CI (root, where test.sh installs it) a missing one is a failure."""
    path = _chromium()
    if path:
        return path
    why = (
        UNAVAILABLE.read_text().strip()
        if UNAVAILABLE.exists()  # scripts/setup-browser.sh tried
        else "chromium is not installed (bash scripts/setup-browser.sh installs Debian's chromium; root)"
    )
    if os.environ.get("CI") == "true":
        pytest.fail(f"the UI test needs chromium under CI: {why}")
    pytest.skip(f"chromium is missing: {why}")


@pytest.fixture(scope="module")
def playwright_api():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:  # a dev dependency: a missing one is a setup failure, not a skip
        pytest.fail(f"the playwright package is missing ({exc}); run scripts/setup.sh (pip install -e '.[dev]')")
    return sync_playwright


@pytest.fixture(scope="module")
def demo_instance(tmp_path_factory, chromium, playwright_api):
    """A temporary instance with every demo log materialized; returns (env, folder)."""
    base = tmp_path_factory.mktemp("webserver_ui")
    home = base / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    env = dict(os.environ)
    for var in ("COMPACTION_TOPICS", "COMPACTION_ALERT_WEBHOOK_URL", "COMPACTION_ALERT_WEBHOOK_TOKEN"):
        env.pop(var, None)  # topics.yaml from the cwd; no alert leaves the machine
    env.update(
        DAGSTER_HOME=str(home),
        COMPACTION_STORE=str(base / "store"),
        COMPACTION_LANDING=str(base / "landing"),
        COMPACTION_LATEST_STATE=str(base / "latest_state"),
        PYTHONUNBUFFERED="1",
    )
    log = base / "demo.log"
    proc = ui_dagster.start(
        [sys.executable, "-m", "compaction_assets.demo", "--events", "3000"], env=env, cwd=ROOT, log=log
    )
    try:
        proc.wait(timeout=DEMO_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the demo did not finish in {DEMO_TIMEOUT_S} s:\n{ui_dagster.tail(log)}")
    finally:
        ui_dagster.stop(proc, grace_s=10, stragglers_s=10)
    assert proc.returncode == 0, f"the demo failed (exit {proc.returncode}):\n{ui_dagster.tail(log)}"
    assert "Warning" not in log.read_text(), f"the demo printed a warning:\n{ui_dagster.tail(log)}"
    scenes = subprocess.run(
        [sys.executable, "-m", "tests.ui_scenes", DIRTY_LOG, BROKEN_LOG],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=DEMO_TIMEOUT_S,
    )
    assert scenes.returncode == 0, f"the UI scenes failed:\n{scenes.stderr[-3000:]}"
    made = json.loads(scenes.stdout.strip().splitlines()[-1])
    assert made["observations"] >= 2, made  # points for the dirty-ratio plot
    assert FAILED_CHECK in made["failed_checks"], made  # the wrong cleaning was caught
    assert "latest_state" not in made["materialized"] and "compacted_log" in made["materialized"], made
    return env, base, made


@pytest.fixture(scope="module")
def webserver(demo_instance):
    """`dagster dev` on 127.0.0.1 over the demo's instance; yields its base URL; always stopped."""
    env, base, _ = demo_instance
    port = ui_dagster.free_port()
    url = f"http://{ui_dagster.HOST}:{port}"
    log = base / "dagster_dev.log"
    # as scripts/ui.sh starts it: Dagster 1.13's `dg dev` on the same workspace.yaml
    proc = ui_dagster.start(
        [
            str(Path(sys.executable).parent / "dg"),
            "dev",
            "-w",
            "workspace.yaml",
            "-h",
            ui_dagster.HOST,
            "-p",
            str(port),
        ],
        env=env,
        cwd=ROOT,
        log=log,
    )
    try:
        info = ui_dagster.wait_until_ready(proc, url, log)
        assert info.get("dagster_webserver_version"), info
        said = log.read_text()
        assert "Warning" not in said and "superseded" not in said, f"dg dev printed a warning:\n{ui_dagster.tail(log)}"
        yield url
    finally:
        ui_dagster.stop(proc)
        assert ui_dagster.wait_group_gone(proc.pid, 10), (
            f"processes of dagster dev still alive after stop: {ui_dagster.group_members(proc.pid)}"
        )


DEFINITIONS = """{
  assetNodes { assetKey { path } partitionDefinition { name type }
    assetChecksOrError { __typename ... on AssetChecks { checks { name blocking } } } }
  repositoriesOrError { __typename
    ... on RepositoryConnection { nodes { name location { name } sensors { name sensorState { status } }
      schedules { name cronSchedule scheduleState { status } } pipelines { name } } }
    ... on PythonError { message } } }"""

HISTORY = """query History($check: String!) {
  assetOrError(assetKey: {path: ["compacted_log"]}) { __typename
    ... on Asset { assetMaterializations(limit: 50) { partition runId } } }
  assetCheckExecutions(assetKey: {path: ["compacted_log"]}, checkName: $check, limit: 50) {
    runId status partition } }"""


RUNS = """{ runsOrError(filter: {tags: [{key: "source", value: "demo"}]}) { __typename
  ... on Runs { results { runId jobName status tags { key value } } } } }"""


def test_the_demos_logs_went_through_one_batch_run(webserver):
    """The demo takes a fleet's path: the discovery sensor's one ingest_batch_job for all its logs, and each
    partition's history (checked above and below) links that run."""
    runs = ui_dagster.graphql(webserver, RUNS)["runsOrError"]["results"]
    assert [(r["jobName"], r["status"]) for r in runs] == [("ingest_batch_job", "SUCCESS")], runs
    tags = {t["key"]: t["value"] for t in runs[0]["tags"]}
    assert sorted(decode_logs(tags["compaction/logs"])) == sorted(DEMO_LOGS), tags
    history = ui_dagster.graphql(webserver, HISTORY, {"check": CHECK_PAGE})
    linked = {
        m["partition"] for m in history["assetOrError"]["assetMaterializations"] if m["runId"] == runs[0]["runId"]
    }
    assert linked == set(DEMO_LOGS), linked


def test_graphql_lists_assets_checks_and_sensors(webserver):
    data = ui_dagster.graphql(webserver, DEFINITIONS)
    nodes = {"/".join(n["assetKey"]["path"]): n for n in data["assetNodes"]}
    assert set(nodes) >= ASSETS, f"assets missing from the UI: {sorted(ASSETS - set(nodes))}"
    for name in ASSETS:
        assert nodes[name]["partitionDefinition"]["name"] == "logs", nodes[name]["partitionDefinition"]
    checks = nodes["compacted_log"]["assetChecksOrError"]
    assert checks["__typename"] == "AssetChecks", checks
    assert {c["name"] for c in checks["checks"]} == CHECKS

    repos = data["repositoriesOrError"]
    assert repos["__typename"] == "RepositoryConnection", repos
    sensors = {s["name"] for r in repos["nodes"] for s in r["sensors"]}
    assert sensors >= SENSORS, f"sensors missing from the UI: {sorted(SENSORS - sensors)}"
    schedules = {s["name"]: s for r in repos["nodes"] for s in r["schedules"]}
    assert set(schedules) >= SCHEDULES, f"schedules missing from the UI: {sorted(SCHEDULES - set(schedules))}"
    assert all(schedules[n]["cronSchedule"] for n in SCHEDULES), schedules
    jobs = {j["name"] for r in repos["nodes"] for j in r["pipelines"]}
    assert jobs >= OPERATOR_JOBS, f"operator jobs missing from the UI: {sorted(OPERATOR_JOBS - jobs)}"

    # The demo left materializations of partitions, and a passed result of every check for those partitions.
    for check in sorted(CHECKS):
        history = ui_dagster.graphql(webserver, HISTORY, {"check": check})
        mats = history["assetOrError"]["assetMaterializations"]
        materialized = {(m["runId"], m["partition"]) for m in mats if m["partition"]}
        assert materialized, f"no partitioned materialization of compacted_log: {mats}"
        executions = history["assetCheckExecutions"]
        checked = {(e["runId"], e["partition"]) for e in executions if e["status"] == "SUCCEEDED"}
        assert checked & materialized, f"{check}: no passed result for a materialized partition: {executions}"
        # the demo's cleanings all pass; only the deliberately wrong cleaning of BROKEN_LOG may fail
        assert all(e["status"] == "SUCCEEDED" for e in executions if e["partition"] != BROKEN_LOG), (check, executions)
    failed = ui_dagster.graphql(webserver, HISTORY, {"check": FAILED_CHECK})["assetCheckExecutions"]
    assert failed[0]["partition"] == BROKEN_LOG and failed[0]["status"] == "FAILED", failed


def _is_loopback(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme in ("data", "blob", "about") or parts.hostname == ui_dagster.HOST


def _wait_for_texts(page, texts: list[str], what: str, timeout_ms: int = 90_000) -> str:
    """Wait until the page's visible text contains every one of `texts`; return that text."""
    try:
        page.wait_for_function(
            "texts => texts.every(t => document.body && document.body.innerText.includes(t))",
            arg=texts,
            timeout=timeout_ms,
            polling=250,
        )
    except Exception as exc:
        body = page.evaluate("document.body ? document.body.innerText : ''")
        missing = [t for t in texts if t not in body]
        raise AssertionError(
            f"{what}: {missing} never appeared ({type(exc).__name__}); page text:\n{body[:3000]}"
        ) from exc
    return page.evaluate("document.body.innerText")


def _save(page, name: str, tmp_dir: Path, clip: dict | None = None) -> bytes:
    png = page.screenshot(path=str(tmp_dir / name), clip=clip)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(tmp_dir / name, SCREENSHOTS / name)
    colours, dominant = ui_png.colour_stats(png)
    assert colours >= 50 and dominant < 0.98, (
        f"{name} looks blank: {colours} colours, the commonest covers {dominant:.1%} of the sampled pixels"
    )
    return png


def _save_for_docs(page, name: str, tmp_dir: Path, clip: dict) -> None:
    """The README's crop of the page, under var/screenshots/docs/ (`cp` it to docs/screenshots/)."""
    png = page.screenshot(path=str(tmp_dir / f"docs_{name}"), clip=clip)
    DOCS_CROPS.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(tmp_dir / f"docs_{name}", DOCS_CROPS / name)
    colours, dominant = ui_png.colour_stats(png, step=2)
    assert colours >= 50 and dominant < 0.99, f"docs crop {name} looks blank: {colours} colours, {dominant:.1%}"
    assert len(png) < DOCS_MAX_BYTES, f"docs crop {name} has {len(png)} bytes (at most {DOCS_MAX_BYTES})"


def test_browser_shows_asset_graph_and_check_result(webserver, demo_instance, chromium, playwright_api, tmp_path):
    # Mark the community newsletter dialog as seen, as its Skip button would, so it covers nothing.
    assert ui_dagster.graphql(webserver, "mutation { setNuxSeen }")["setNuxSeen"] is True
    latest = ui_dagster.graphql(webserver, HISTORY, {"check": CHECK_PAGE})["assetCheckExecutions"]
    assert latest and latest[0]["partition"], f"no partitioned result of {CHECK_PAGE}: {latest}"
    latest_partition = latest[0]["partition"]  # the check page shows the latest execution's partition
    blocked: list[str] = []
    page_errors: list[str] = []

    def keep_local(route):
        if _is_loopback(route.request.url):
            route.continue_()
        else:
            blocked.append(route.request.url)
            route.abort()

    with playwright_api() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS, timeout=120_000)
        try:
            context = browser.new_context(viewport={"width": 1600, "height": 1000})
            context.route("**/*", keep_local)
            page = context.new_page()
            page.set_default_timeout(90_000)
            page.on("pageerror", lambda exc: page_errors.append(str(exc)))

            # The asset graph ("Global asset lineage"): every asset node with its live data.
            page.goto(f"{webserver}/asset-groups", wait_until="domcontentloaded")
            text = _wait_for_texts(
                page, ["Global asset lineage", *sorted(ASSETS), "Latest event", "Asset checks"], "asset graph"
            )
            # the nodes' live data (latest events, check results) has arrived
            page.wait_for_function("() => !document.body.innerText.includes('Loading')")
            text = page.evaluate("document.body.innerText")
            # compacted_log's node: the latest partition's checks, the broken one's (only its blocking
            # latest_value_per_key fails: the wrong cleaning keeps every record, order and deadline intact)
            failed = CHECKS & set(demo_instance[2]["failed_checks"])
            assert failed and f"{len(CHECKS) - len(failed)} / {len(CHECKS)} Passed" in text, failed
            assert "Join the Dagster community" not in text
            assert page.locator("text=compacted_log").count() >= 2  # in the sidebar and as a graph node
            _save(page, "asset_graph.png", tmp_path)
            # the README's crop: the graph's nodes (drawn as SVG foreignObjects), with a margin
            nodes = page.evaluate("""() => [...document.querySelectorAll('foreignObject')]
                .map(e => e.getBoundingClientRect()).filter(r => r.width > 0 && r.height > 0)
                .map(r => [r.left, r.top, r.right, r.bottom])""")
            assert len(nodes) >= len(ASSETS), f"the graph's nodes were not found: {nodes}"
            left, top = min(n[0] for n in nodes) - 16, min(n[1] for n in nodes) - 16
            _save_for_docs(
                page,
                "asset_graph.png",
                tmp_path,
                {
                    "x": max(0, left),
                    "y": max(0, top),
                    "width": max(n[2] for n in nodes) + 16 - max(0, left),
                    "height": max(n[3] for n in nodes) + 16 - max(0, top),
                },
            )

            # The schedules (Automation) and the operator jobs (Jobs), as an operator finds them.
            page.goto(f"{webserver}/automation", wait_until="domcontentloaded")
            _wait_for_texts(page, sorted(SCHEDULES | SENSORS), "schedules and sensors")
            _save(page, "automation.png", tmp_path)
            page.goto(f"{webserver}/jobs", wait_until="domcontentloaded")
            _wait_for_texts(page, sorted(OPERATOR_JOBS), "operator jobs")
            _save(page, "jobs.png", tmp_path)

            # The dirty-ratio plot: compacted_log's metadata over its events (the sensor's observations of
            # DIRTY_LOG while records arrived, `observed_dirty_ratio`, apart from the cleanings' `dirty_ratio`).
            page.goto(f"{webserver}/assets/compacted_log?view=overview", wait_until="domcontentloaded")
            _wait_for_texts(page, ["Metadata", "Plots"], "asset overview")
            page.get_by_text("Plots", exact=True).first.click()
            _wait_for_texts(page, ["When graphing values by partition"], "metadata plots by partition")
            # plots over events, not partitions: the toggle's "Events" comes after the tab of that name
            page.get_by_text("Events", exact=True).last.click()
            _wait_for_texts(page, ["observed_dirty_ratio"], "metadata plots over events")
            page.wait_for_function("() => document.querySelectorAll('canvas').length > 0")  # the charts
            title = page.get_by_text("observed_dirty_ratio", exact=True).first
            title.scroll_into_view_if_needed()
            page.wait_for_timeout(1500)  # the chart's drawing animation
            box = title.bounding_box()
            assert box is not None, "the dirty_ratio plot has no title on screen"
            clip = {"x": max(0, box["x"] - 16), "y": max(0, box["y"] - 12), "width": 400, "height": 250}
            _save(page, "dirty_ratio_plot.png", tmp_path, clip=clip)
            _save_for_docs(page, "dirty_ratio_plot.png", tmp_path, clip)

            # A passed check of compacted_log: the Checks tab with one check's latest execution (of a partition).
            page.goto(
                f"{webserver}/assets/compacted_log?view=checks&checkDetail={CHECK_PAGE}", wait_until="domcontentloaded"
            )
            text = _wait_for_texts(
                page,
                [
                    f"Checks ({len(CHECKS)})",
                    *sorted(CHECKS),
                    "Latest execution",
                    "Evaluation result",
                    "Passed",
                    f"Partition\n{latest_partition}",
                    "Metadata",
                ],
                f"check {CHECK_PAGE}",
            )
            assert "Join the Dagster community" not in text
            _save(page, f"compacted_log_check_{CHECK_PAGE}.png", tmp_path)

            # The failed one: the wrong cleaning of BROKEN_LOG, its reason and examples, blocking.
            page.goto(
                f"{webserver}/assets/compacted_log?view=checks&checkDetail={FAILED_CHECK}",
                wait_until="domcontentloaded",
            )
            text = _wait_for_texts(
                page,
                [
                    "Latest execution",
                    "Evaluation result",
                    "Failed",
                    f"Partition\n{BROKEN_LOG}",
                    "kept that are not their key's winner",
                    "examples_records_not_the_winner",
                ],
                f"check {FAILED_CHECK}",
            )
            assert "This is a blocking asset check." in text
            _save(page, "check_failure.png", tmp_path)
            # the README's crop: the Checks tab without the navigation, down to the end of the failure's metadata
            panel = page.get_by_text(f"Checks ({len(CHECKS)})", exact=True).first.bounding_box()
            last_row = page.get_by_text("winning_values_missing", exact=True).first.bounding_box()
            assert panel is not None and last_row is not None, (panel, last_row)
            left, size = max(0, panel["x"] - 24), page.viewport_size
            bottom = min(size["height"], last_row["y"] + last_row["height"] + 16)
            _save_for_docs(
                page,
                "check_failure.png",
                tmp_path,
                {"x": left, "y": 0, "width": size["width"] - left, "height": bottom},
            )
        finally:
            browser.close()

    assert not page_errors, f"uncaught errors in the UI: {page_errors}"
    if blocked:
        warnings.warn(f"the UI tried to reach beyond 127.0.0.1 (blocked): {sorted(set(blocked))}", stacklevel=1)
    for name in (
        "asset_graph.png",
        "automation.png",
        "jobs.png",
        "dirty_ratio_plot.png",
        f"compacted_log_check_{CHECK_PAGE}.png",
        "check_failure.png",
    ):
        assert (SCREENSHOTS / name).stat().st_size > 0, name
    for name in ("asset_graph.png", "dirty_ratio_plot.png", "check_failure.png"):  # the README's three
        assert (DOCS_CROPS / name).stat().st_size > 0, name

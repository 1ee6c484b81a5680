"""The status pages in a real browser (docs/operations.md §13): ``hadev up`` as a user runs it,
the page URLs it prints, and Debian's headless ``chromium`` reading them: what a person reads
(the HA states, the three JournalNodes in sync, txid figures that move after writes), with
screenshots kept in the test's temporary directory. The standby is restarted over an edit log
of a few hundred edits with its page open: the page lists its startup phases (§13.3) as they
complete, the edits replayed with their count; and a phase still running (an in-process
standby whose tailer waits an hour) shows as running, its time growing with each refresh.
Then a JournalNode is killed with SIGKILL while the active's page is open in the browser
(selenium over ``chromedriver``), and the page shows it out of contact within seconds, with
no script error and no failed refresh.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from conf import load_settings
from hadev.daemon import child_environment
from hadev.namenodes import hanamenode_command
from hadev.zookeeper import runs
from hanamenode.client import HaFsClient
from tests.chaos.test_dev_cluster import hadev_down, hadev_up, wait_running
from tests.namenode.cluster import NameNodeCluster
from tests.status.browser import chromium_paths

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")

pytestmark = pytest.mark.timeout(420)


@pytest.fixture(autouse=True)
def _chromium() -> None:
    """Without chromium and chromedriver these tests fail, naming them (issue 28)."""
    chromium_paths()

CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
)


@dataclass
class Dev:
    directory: Path
    conf: Path
    urls: dict[str, str]  # nn1, nn2, jn1.. -> status page URL
    proc: subprocess.Popen[bytes]
    restarted: list[subprocess.Popen[bytes]] = field(default_factory=list)
    """Daemons a test started again itself: hadev up forgets them, the fixture stops them."""

    def pid(self, name: str) -> int:
        return int((self.directory / "run" / f"{name}.pid").read_text())


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dev]:
    base = tmp_path_factory.mktemp("status")
    directory, log = base / "dev", base / "hadev.out"
    proc = hadev_up(directory, log)
    restarted: list[subprocess.Popen[bytes]] = []
    try:
        text = wait_running(proc, log, timeout=120)
        # hadev up prints a line per daemon under "Status pages": "  nn1  http://.../status"
        urls = dict(re.findall(r"^  (nn\d|jn\d)\s+(http://\S+/status)$", text, re.MULTILINE))
        assert sorted(urls) == ["jn1", "jn2", "jn3", "nn1", "nn2"], text
        yield Dev(directory, directory / "conf" / "ha-site.xml", urls, proc, restarted)
    finally:
        stubborn = []
        for daemon in restarted:
            daemon.terminate()
            try:
                daemon.wait(60)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait(10)
                stubborn.append(daemon.pid)
        down = hadev_down(directory)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        assert down.returncode == 0, down.stderr
        assert not stubborn, f"restarted daemons ignored SIGTERM for 60 s: {stubborn}"


def chromium(*args: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    profile = tmp / f"profile-{time.monotonic_ns()}"
    command = ["nice", str(CHROMIUM), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    shutil.rmtree(profile, ignore_errors=True)
    assert result.returncode == 0, (command, result.stderr[-2000:])
    return result


def dump_dom(url: str, tmp: Path) -> str:
    return chromium("--dump-dom", url, tmp=tmp).stdout


def screenshot(url: str, path: Path, tmp: Path) -> Path:
    chromium("--window-size=1280,1100", f"--screenshot={path}", url, tmp=tmp)
    assert path.stat().st_size > 10_000, path  # a rendered page, not an empty canvas
    print(f"screenshot: {path}")
    return path


def status_json(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url + ".json", timeout=10) as response:
        return dict(json.load(response))


def ha_state(dom: str) -> str:
    found = re.search(r'id="ha-state"[^>]*>([a-z]+)<', dom)
    assert found, dom[:2000]
    return found.group(1)


def table_rows(dom: str, table_id: str) -> list[list[str]]:
    """The text of each cell of each data row of one table."""
    found = re.search(rf'<table id="{table_id}">(.*?)</table>', dom, re.DOTALL)
    assert found, (table_id, dom[:3000])
    rows = re.findall(r"<tr>(.*?)</tr>", found.group(1), re.DOTALL)[1:]
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in rows]
    return [[re.sub(r"<[^>]+>", "", cell) for cell in row] for row in cells]


def test_pages_read_in_a_browser_and_figures_move_after_writes(dev: Dev, tmp_path: Path) -> None:
    doms = {nn: dump_dom(dev.urls[nn], tmp_path) for nn in ("nn1", "nn2")}
    states = {nn: ha_state(dom) for nn, dom in doms.items()}
    assert sorted(states.values()) == ["active", "standby"], states
    active = next(nn for nn, s in states.items() if s == "active")
    standby = next(nn for nn, s in states.items() if s == "standby")

    jn_addresses = {jn: status_json(dev.urls[jn])["rpc_address"] for jn in ("jn1", "jn2", "jn3")}
    journals = table_rows(doms[active], "journals")
    # journal, address, status, lag, acknowledged txid, queued bytes, last contact
    assert sorted(row[1] for row in journals) == sorted(jn_addresses.values()), journals
    assert [row[2] for row in journals] == ["in sync"] * 3, journals
    assert "Not writing: only the active NameNode writes the edit log." in doms[standby]
    assert table_rows(doms[standby], "tailer"), doms[standby]
    assert "NameNode Journal Status" in doms[active] and "Failover elector" in doms[active]
    elector = table_rows(doms[active], "elector")[0]
    assert elector[3] == active, elector  # the lock holder, read from ZooKeeper

    before_ns = table_rows(doms[active], "namespace")[0]
    before_acked = {row[1]: int(row[4]) for row in journals}
    before_jn = table_rows(dump_dom(dev.urls["jn1"], tmp_path), "journals")[0]
    writes = 40
    with HaFsClient(load_settings(dev.conf)) as fs:
        for i in range(writes):
            fs.mkdirs(f"/status-page/d{i}", parents=True)
    after = dump_dom(dev.urls[active], tmp_path)
    after_ns = table_rows(after, "namespace")[0]
    # directories, files, last applied txid, last written txid, checkpoint txid, checkpoint
    assert int(after_ns[0]) == int(before_ns[0]) + writes + 1, (before_ns, after_ns)
    assert int(after_ns[3]) >= int(before_ns[3]) + writes, (before_ns, after_ns)
    after_journals = table_rows(after, "journals")
    # The active answers once a majority has acknowledged: the third JournalNode may still be
    # a batch behind when the page is read. It must catch up as soon as the writes stop.
    deadline = time.monotonic() + 20
    while any(int(row[3]) != 0 for row in after_journals) and time.monotonic() < deadline:
        time.sleep(0.2)
        after_journals = table_rows(dump_dom(dev.urls[active], tmp_path), "journals")
    for row in after_journals:
        assert int(row[4]) >= before_acked[row[1]] + writes, (journals, after_journals)
        assert row[2] == "in sync" and int(row[3]) == 0, after_journals
    after_jn = table_rows(dump_dom(dev.urls["jn1"], tmp_path), "journals")[0]
    # journal, cluster, promised, writer epoch, committed txid, last written txid, ...
    assert int(after_jn[5]) >= int(before_jn[5]) + writes, (before_jn, after_jn)
    assert int(after_jn[4]) >= int(before_jn[4]) + writes - 1, (before_jn, after_jn)

    # The standby's page: its applied txid catches up (in-progress tailing of the dev cluster).
    deadline = time.monotonic() + 30
    while True:
        standby_ns = table_rows(dump_dom(dev.urls[standby], tmp_path), "namespace")[0]
        if int(standby_ns[2]) >= int(after_ns[3]) or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert int(standby_ns[2]) >= int(after_ns[3]), (standby_ns, after_ns)

    for name in (active, standby, "jn1"):
        screenshot(dev.urls[name], tmp_path / f"{name}.png", tmp_path)


def browser(tmp_path: Path) -> Any:
    """Headless chromium driven by selenium over chromedriver; the caller quits it."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path / 'selenium-profile'}")
    options.add_argument("--window-size=1280,1100")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))


def no_script_error_then_screenshot(driver: Any, path: Path) -> Path:
    """The page logged no error in the browser (a failed refresh or script); keep its look."""
    errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == [], errors
    driver.save_screenshot(str(path))
    print(f"screenshot: {path}")
    return path


def restart_namenode(dev: Dev, nn: str) -> int:
    """Stop ``nn`` (SIGTERM) and start it again as ``hadev up`` does, outside of it: same
    configuration and log; the ``dev`` fixture stops it (``hadev down`` would not: ``hadev
    up`` removes every pid file of its cluster as it stops)."""
    pid, pid_file = dev.pid(nn), dev.directory / "run" / f"{nn}.pid"
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    # hadev up reports the exit and removes the pid file: then the ports are free.
    while runs(pid, ()) or pid_file.exists():
        assert time.monotonic() < deadline, f"{nn} (pid {pid}) did not stop"
        time.sleep(0.1)
    with open(dev.directory / "logs" / f"{nn}.log", "ab") as out:
        proc = subprocess.Popen(
            [*hanamenode_command("run", nn, dev.conf), "--log-format", "console"],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            env=child_environment(), start_new_session=True,
        )
    dev.restarted.append(proc)
    return proc.pid


def test_a_restarted_namenode_lists_its_startup_phases(dev: Dev, tmp_path: Path) -> None:
    states = {nn: status_json(dev.urls[nn])["ha_state"] for nn in ("nn1", "nn2")}
    active = next(nn for nn, s in states.items() if s == "active")
    standby = next(nn for nn, s in states.items() if s == "standby")
    writes = 300
    with HaFsClient(load_settings(dev.conf)) as fs:
        for i in range(writes):
            fs.mkdirs(f"/startup-page/d{i}", parents=True)
    written = status_json(dev.urls[active])["namespace"]["last_written_txid"]

    restart_namenode(dev, standby)
    driver = browser(tmp_path)
    try:
        deadline = time.monotonic() + 60
        while True:  # the HTTP port answers before the image is loaded
            try:
                driver.get(dev.urls[standby])
                if driver.find_elements("id", "startup"):
                    break
            except Exception as exc:  # not listening yet: chromium's error page, or refused
                print(f"waiting for {standby}'s page: {type(exc).__name__}")
            assert time.monotonic() < deadline, f"{standby}'s page did not come up"
            time.sleep(0.3)
        driver.get_log("browser")  # drops the refused loads of before it listened

        def startup() -> tuple[str, list[list[str]]]:
            summary, rows = driver.execute_script(
                "var s = document.getElementById('startup-summary');"
                "return [s ? s.textContent : '', "
                "Array.from(document.querySelectorAll('#startup tr')).slice(1)"
                ".map(r => Array.from(r.cells).map(c => c.textContent))];"
            )
            return summary, rows

        seen: list[tuple[str, ...]] = []
        while not (shown := startup())[0].startswith("Startup complete"):
            seen.append(tuple(f"{r[0]}: {r[1]}" for r in shown[1]))
            assert time.monotonic() < deadline, shown
            time.sleep(0.2)
        print("phases seen while it started:", sorted(set(seen)))
        summary, rows = shown
        # phase, status, elapsed, figures
        assert [(r[0], r[1]) for r in rows] == [
            ("Loading fsimage", "complete"),
            ("Becoming standby", "complete"),
            ("Loading edits", "complete"),
        ], rows
        figures = status_json(dev.urls[standby])["startup"]["phases"]
        image, edits = figures[0]["details"], figures[2]["details"]
        assert rows[0][3] == f"{image['image']}: txid {image['txid']:,}, {image['inodes']:,} inodes"
        assert edits["from_txid"] == image["txid"] + 1, figures
        assert edits["last_txid"] >= written and edits["applied"] >= writes, (figures, written)
        assert edits["applied"] == edits["last_txid"] - image["txid"], figures
        assert f"{edits['applied']:,} edits applied, by the tailer" in rows[2][3], rows
        assert f"to {edits['last_txid']:,}" in rows[2][3], rows
        assert all(re.fullmatch(r"\d+\.\d{3} s", r[2]) for r in rows), rows
        assert ha_state(driver.page_source) == "standby"
        driver.execute_script("document.getElementById('startup').scrollIntoView()")
        no_script_error_then_screenshot(driver, tmp_path / "restarted-standby.png")
        print(summary, rows)
    finally:
        driver.quit()


def test_a_phase_in_progress_shows_running_and_its_time_grows(tmp_path: Path) -> None:
    # The standby's tailer waits an hour before its first round: its edits stay to load.
    with NameNodeCluster(tmp_path / "nn", conf={"dfs.ha.tail-edits.period": "3600"}) as c:
        url = f"http://127.0.0.1:{c.server('nn2').metrics_port}/status"
        driver = browser(tmp_path)
        try:
            driver.get(url)

            def edits_row() -> list[str]:
                rows = driver.execute_script(
                    "return Array.from(document.querySelectorAll('#startup tr')).slice(1)"
                    ".map(r => Array.from(r.cells).map(c => c.textContent));"
                )
                return next(r for r in rows if r[0] == "Loading edits")

            first = edits_row()
            summary = driver.find_element("id", "startup-summary").text
            assert summary.startswith("Startup in progress after "), summary
            # phase, status, elapsed, figures
            assert first[1] == "running", first
            assert first[3] == "from txid 1: 0 edits applied so far, by the tailer", first
            tailer = driver.execute_script(
                "return Array.from(document.querySelectorAll('#tailer td'))"
                ".map(c => c.textContent);"
            )
            assert tailer[0] == "-", tailer  # lag, seconds since last load, last error
            time.sleep(2.5)  # one refresh of the page's script
            later = edits_row()
            assert later[1] == "running", later
            assert float(later[2].split()[0]) > float(first[2].split()[0]) + 1, (first, later)
            no_script_error_then_screenshot(driver, tmp_path / "standby-loading-edits.png")
            print(first, "then", later)
        finally:
            driver.quit()


def test_a_journalnode_killed_while_the_page_is_open(dev: Dev, tmp_path: Path) -> None:
    states = {nn: status_json(dev.urls[nn])["ha_state"] for nn in ("nn1", "nn2")}
    active = next(nn for nn, s in states.items() if s == "active")
    victim = status_json(dev.urls["jn3"])["rpc_address"]

    driver = browser(tmp_path)
    try:
        driver.get(dev.urls[active])

        def rows() -> dict[str, str]:
            cells = driver.execute_script(
                "return Array.from(document.querySelectorAll('#journals tr')).slice(1)"
                ".map(r => Array.from(r.cells).map(c => c.textContent));"
            )
            return {row[1]: row[2] for row in cells}

        assert set(rows().values()) == {"in sync"}, rows()
        os.kill(dev.pid("jn3"), signal.SIGKILL)
        killed = time.monotonic()
        while rows().get(victim) != "out of contact":
            assert time.monotonic() - killed < 20, rows()
            time.sleep(0.2)
        print(f"jn3 shown out of contact {time.monotonic() - killed:.1f}s after SIGKILL")
        others = {a: s for a, s in rows().items() if a != victim}
        assert set(others.values()) == {"in sync"}, others
        time.sleep(3)  # two more refreshes with a JournalNode gone
        footer = driver.find_element("id", "refreshed").text
        assert footer.startswith("refreshed "), footer
        no_script_error_then_screenshot(driver, tmp_path / "journalnode-killed.png")
    finally:
        driver.quit()
    # The killed JournalNode's own page is gone with it; the active's still answers.
    assert status_json(dev.urls[active])["ha_state"] == "active"

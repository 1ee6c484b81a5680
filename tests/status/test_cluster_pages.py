"""The cluster page, the failover history and the "unreachable since" pages in a real browser
(docs/operations.md §13.1, §13.4; issue 28 items 1-2), against a real dev cluster: a real
ZooKeeper, three JournalNode and two NameNode processes with automatic failover, read by
Debian's headless Chromium over chromedriver, with the pages left open while things happen:

- a ``hactl failover``: the open cluster page shows the new active by itself (its own
  refresh), every daemon by its configured id and linked; each NameNode's page lists the
  transition with its cause, and the old active no longer says it "became active";
- a ``kill -9`` of the active: its open pages (its own, its cluster page) turn "unreachable
  since HH:MM:SS", greyed, with no "active" left on them; the survivor's cluster page shows
  it unreachable and the survivor active, its history saying "expired session";
- a ``kill -9`` of a JournalNode: its open page turns unreachable the same way, and the
  active's cluster page shows it unreachable and out of contact;
- that JournalNode back on an empty disk: its page shows it rejoining, then serving.

The tests fail (they do not skip) without chromium and chromedriver (tests/status/browser.py).
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hadev.devcluster import DevCluster
from hanamenode.peers import NameNodePeers
from proto import namenode_pb2
from tests.status.browser import open_browser, table_rows, text_of, wait_until

pytestmark = pytest.mark.timeout(180)

REFRESH_WAIT = 12.0
"""Longest wait for an open page to show a change: a refresh every 2 s, a takeover after a
1 s session timeout, on a loaded machine."""


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    with DevCluster(tmp_path_factory.mktemp("cluster-pages"), session_timeout=1.0) as dev:
        yield dev


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with open_browser(tmp_path_factory.mktemp("chromium")) as driver:
        yield driver


def status_url(dev: DevCluster, name: str) -> str:
    if name.startswith("nn"):
        url = dev.namenode(name).status_url
        assert url is not None, name
        return url
    return next(jn.status_url for jn in dev.journalnodes if jn.jn_id == name)


def cluster_url(dev: DevCluster, nn: str) -> str:
    return status_url(dev, nn).removesuffix("/status") + "/cluster"


def status_json(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url + ".json", timeout=10) as answer:
        return dict(json.load(answer))


def roll(dev: DevCluster) -> None:
    """Write an edit, then have the active roll its edit log as a standby asks it to (a
    NameNode's certificate): the open segment is finalized (a roll of a segment that holds
    only its start is a no-op)."""
    with dev.client() as fs:
        fs.mkdirs(f"/status-pages/roll-{time.monotonic_ns()}", parents=True)
    active = dev.wait_active()
    standby = next(nn for nn in dev.namenode_ids if nn != active)
    with NameNodePeers.from_settings(dev.settings().for_daemon(standby), standby) as peers:
        peers.namenode(peers.find(active)).RollEditLog(namenode_pb2.HAEmpty(), timeout=20)


def cluster_states(driver: Any, table_id: str) -> dict[str, str]:
    """Id -> state, as the open cluster page shows them now."""
    return {row[0]: row[1] for row in table_rows(driver, table_id)}


def history(driver: Any) -> list[tuple[str, str, str]]:
    """(from, to, cause) of each transition the open NameNode page lists, newest first."""
    return [(r[1], r[2], r[3]) for r in table_rows(driver, "transitions")]


def shows_unreachable(driver: Any, own_state_id: str) -> str | None:
    """The "unreachable since" text of an open page that turned unreachable, else None; and
    then no state on it may still read "active"."""
    own = text_of(driver, own_state_id)
    if not own.startswith("unreachable since "):
        return None
    states = driver.execute_script(
        "return Array.from(document.querySelectorAll('.state')).map(e => e.textContent);"
    )
    assert not {"active", "serving", "in sync"} & set(states), states
    # "Active since ..." and the cluster's summary go with the states.
    assert not [e.text for e in driver.find_elements("css selector", ".when-reachable")
                if e.is_displayed()]
    assert driver.execute_script("return document.body.classList.contains('unreachable');")
    banner = text_of(driver, "unreachable")
    assert banner.startswith(own), (banner, own)
    return own


def test_a_graceful_failover_on_the_open_cluster_page_and_in_the_history(
    dev: DevCluster, driver: Any
) -> None:
    first = dev.wait_active()
    second = next(nn for nn in dev.namenode_ids if nn != first)
    driver.get(cluster_url(dev, second))
    assert cluster_states(driver, "cluster-namenodes") == {first: "active", second: "standby"}
    assert cluster_states(driver, "cluster-journalnodes") == {
        "jn1": "serving", "jn2": "serving", "jn3": "serving"
    }
    # journalnode, state, address, last txid, lag, last contact, the active's view, note:
    # the standby's page shows the active's view, read from the active's status.json.
    views = {r[0]: r[6] for r in table_rows(driver, "cluster-journalnodes")}
    assert views == {"jn1": "in sync", "jn2": "in sync", "jn3": "in sync"}, views
    links = driver.execute_script(
        "return Array.from(document.querySelectorAll('#cluster-namenodes a, "
        "#cluster-journalnodes a')).map(a => [a.textContent, a.href]);"
    )
    assert dict(links) == {name: status_url(dev, name) for name in dev.names if name != "zk"}

    done = dev.hactl("failover", first, second)
    assert done.returncode == 0, done.stderr
    # The page was not reloaded: its own refresh shows the new active.
    wait_until(
        "the open cluster page showing the failover",
        lambda: cluster_states(driver, "cluster-namenodes") == {first: "standby",
                                                                 second: "active"},
        REFRESH_WAIT,
    )

    driver.get(status_url(dev, second))
    assert text_of(driver, "ha-state") == "active"
    assert history(driver)[0] == ("standby", "active", "graceful"), history(driver)
    assert text_of(driver, "state-since").startswith("Active since ")
    driver.get(status_url(dev, first))
    assert text_of(driver, "ha-state") == "standby"
    assert history(driver)[:2] == [
        ("active", "standby", "graceful"), ("standby", "active", "election")
    ], history(driver)
    # elector state, ZooKeeper, healthy, lock holder, last attempt, last fencing: its first
    # election's "became active in 0.0xs" does not outlive the step-down.
    elector = table_rows(driver, "elector")[0]
    assert elector[4] == "none", elector
    assert "became active" not in driver.page_source


def test_kill_9_of_the_active_with_its_pages_open(
    dev: DevCluster, driver: Any, tmp_path: Path
) -> None:
    active = dev.wait_active()
    other = next(nn for nn in dev.namenode_ids if nn != active)
    driver.get(status_url(dev, active))
    assert text_of(driver, "ha-state") == "active"
    dead_page = driver.current_window_handle
    driver.switch_to.new_window("tab")
    driver.get(cluster_url(dev, active))
    dead_cluster_page = driver.current_window_handle
    driver.switch_to.new_window("tab")
    driver.get(cluster_url(dev, other))
    survivor_page = driver.current_window_handle

    dev.kill(active)
    driver.switch_to.window(dead_page)
    since = wait_until(
        f"{active}'s open page turning unreachable",
        lambda: shows_unreachable(driver, "ha-state"), REFRESH_WAIT,
    )
    print(f"{active}'s page: {since}")
    driver.save_screenshot(str(tmp_path / "killed-active.png"))
    print(f"screenshot: {tmp_path / 'killed-active.png'}")
    # Its cluster page too: its own row by the text, every other state "unknown".
    driver.switch_to.window(dead_cluster_page)
    wait_until(
        f"{active}'s open cluster page turning unreachable",
        lambda: shows_unreachable(driver, f"state-{active}"), REFRESH_WAIT,
    )
    assert text_of(driver, f"state-{other}") == "unknown"
    driver.close()

    driver.switch_to.window(survivor_page)
    wait_until(
        f"{other}'s cluster page showing it active and {active} unreachable",
        lambda: cluster_states(driver, "cluster-namenodes") == {active: "unreachable",
                                                                 other: "active"},
        REFRESH_WAIT,
    )
    row = next(r for r in table_rows(driver, "cluster-namenodes") if r[0] == active)
    assert "Connection refused" in row[7], row  # the note says why
    driver.close()
    driver.switch_to.window(dead_page)
    transitions = status_json(status_url(dev, other))["transitions"]
    assert (transitions[0]["from"], transitions[0]["to"], transitions[0]["cause"]) == (
        "standby", "active", "expired session"
    ), transitions
    assert f"{active} fenced by" in transitions[0]["detail"], transitions[0]
    driver.get(status_url(dev, other))
    assert history(driver)[0] == ("standby", "active", "expired session"), history(driver)


def test_a_journalnode_page_turns_unreachable_when_it_dies(dev: DevCluster, driver: Any) -> None:
    active = dev.wait_active()
    driver.get(status_url(dev, "jn3"))
    assert text_of(driver, "jn-state") == "serving"
    # journal, state, rejoin point, segments lacking, synced, bytes, failures, corrupt, md5
    sync = table_rows(driver, "journal-sync")
    assert [(r[1], r[2], r[3]) for r in sync] == [("serving", "-", "0")], sync
    assert driver.find_elements("css selector", "table[id^='segments-']")
    jn_page = driver.current_window_handle
    driver.switch_to.new_window("tab")
    driver.get(cluster_url(dev, active))
    cluster_page = driver.current_window_handle

    dev.kill("jn3")
    driver.switch_to.window(jn_page)
    since = wait_until(
        "jn3's open page turning unreachable",
        lambda: shows_unreachable(driver, "jn-state"), REFRESH_WAIT,
    )
    print(f"jn3's page: {since}")
    driver.switch_to.window(cluster_page)

    def jn3_row() -> list[str] | None:
        rows = {r[0]: r for r in table_rows(driver, "cluster-journalnodes")}
        # journalnode, state, address, last txid, lag, last contact, the active's view, note
        done = rows["jn3"][1] == "unreachable" and rows["jn3"][6] == "out of contact"
        return rows["jn3"] if done else None

    row = wait_until("the active's cluster page showing jn3 lost", jn3_row, REFRESH_WAIT)
    others = cluster_states(driver, "cluster-journalnodes")
    assert others == {"jn1": "serving", "jn2": "serving", "jn3": "unreachable"}, others
    assert row[5] != "never", row  # the last answer it had from jn3, before the kill


def test_a_wiped_journalnode_shows_its_rejoin_and_sync(dev: DevCluster, driver: Any) -> None:
    """jn3 (killed above) comes back on an empty disk: it formats itself from its peers and
    syncs their finalized segments, but it votes only once it holds them through the txid
    they held when it rejoined, which the open segment holds: its page says "rejoining" with
    that point until a failover finalizes the segment (docs/protocol.md §10.3)."""
    def finalized() -> int:
        segments = status_json(status_url(dev, "jn1"))["journals"][0]["segments"]
        return sum(not seg["in_progress"] for seg in segments)

    if not finalized():  # run alone
        roll(dev)
    assert finalized()
    dev.wipe_journalnode("jn3")
    url = status_url(dev, "jn3")

    def journal(state: str) -> dict[str, Any] | None:
        journals = status_json(url)["journals"]  # empty until its first sync round
        found = journals[0] if journals else None
        done = found is not None and found["state"] == state and found["sync"]["segments_synced"]
        return found if done else None

    rejoining = wait_until("jn3 rejoining with synced segments", lambda: journal("rejoining"), 20)
    assert rejoining["rejoin_txid"] > max(
        s["end_txid"] for s in rejoining["segments"] if not s["in_progress"]
    ), rejoining
    driver.get(url)
    assert text_of(driver, "jn-state") == "rejoining"
    # journal, state, rejoin point, segments lacking, segments synced, bytes synced, ...
    row = table_rows(driver, "journal-sync")[0]
    assert (row[1], row[2]) == ("rejoining", str(rejoining["rejoin_txid"])), row
    assert int(row[4]) >= rejoining["sync"]["segments_synced"] > 0, row  # still syncing
    assert int(row[5]) > 0, row
    peers = {r[0]: r[2] for r in table_rows(driver, "sync-peers")}
    assert peers == {"jn1": "answered", "jn2": "answered"}, peers

    roll(dev)  # finalizes the open segment
    wait_until(
        "jn3's open page showing it serving once the segment is finalized and synced",
        lambda: text_of(driver, "jn-state") == "serving", REFRESH_WAIT,
    )

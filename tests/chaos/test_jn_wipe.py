"""``hadev jn-wipe`` under load (issue 14 §3): ``hadev up`` runs the dev cluster as a user
runs it, writers make directories through ``HaFsClient``, and ``hadev jn-wipe jn3`` from
another process stops jn3, empties its storage and starts it again. jn3 formats itself from
its peers and syncs (docs/protocol.md §10): every finalized segment the others held at the
wipe is back on jn3, byte for byte, it votes again, and no writer saw a failed call or lost
an acknowledged directory."""

from __future__ import annotations

import signal
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from conf import load_settings
from hadev.cli import cli
from hadev.devcluster import JOURNAL_ID, LOAD_POLICY, DevCluster, MkdirLoad
from hadev.namenodes import run_command
from hanamenode.client import HaFsClient
from journalnode.segment_names import FINALIZED
from tests.chaos.test_dev_cluster import hadev_down, hadev_up, wait_running

pytestmark = pytest.mark.timeout(240)

WAIT = 30.0


def finalized(current: Path) -> dict[str, bytes]:
    if not current.is_dir():
        return {}
    return {p.name: p.read_bytes() for p in current.iterdir() if FINALIZED.fullmatch(p.name)}


def rejoining(metrics_url: str) -> float | None:
    try:
        with urllib.request.urlopen(metrics_url, timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return None
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "journalnode_rejoining" and sample.labels["journal"] == JOURNAL_ID:
                return float(sample.value)
    return None


def test_hadev_jn_wipe_under_load(tmp_path: Path) -> None:
    directory, log = tmp_path / "dev", tmp_path / "hadev.out"
    proc = hadev_up(directory, log)
    try:
        wait_running(proc, log)
        settings = load_settings(directory / "conf" / "ha-site.xml")
        jn1 = directory / "data" / "journal" / "jn1" / JOURNAL_ID / "current"
        jn3 = directory / "data" / "journal" / "jn3" / JOURNAL_ID / "current"
        jn3_metrics = f"http://{settings.journalnode('jn3').http_address}/metrics"
        with MkdirLoad(settings, "/wipe", writers=2, pause=0.005) as load:
            assert load.wait_acks(50, timeout=20), "no load before the wipe"
            deadline = time.monotonic() + WAIT
            while len(before := finalized(jn1)) < 2:  # rolls: finalized segments to lose
                assert time.monotonic() < deadline, f"jn1 holds {sorted(before)} only"
                time.sleep(0.1)
            wiped_at = time.time()
            result = run_command(
                [sys.executable, "-m", "hadev.cli", "jn-wipe", "jn3", "--dir", str(directory)]
            )
            assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
            assert "restarted on an empty" in result.stdout, result.stdout
            deadline = time.monotonic() + WAIT
            while True:
                on_jn3 = finalized(jn3)
                if all(on_jn3.get(name) == data for name, data in before.items()):
                    break
                assert time.monotonic() < deadline, (
                    f"jn3 lacks {sorted(set(before) - set(on_jn3))} {WAIT:g}s after the wipe"
                )
                time.sleep(0.2)
            while rejoining(jn3_metrics) != 0:
                assert time.monotonic() < deadline, "jn3 still does not vote"
                time.sleep(0.2)
            synced_after = time.time() - wiped_at
            acks_after = load.acks_since(wiped_at)
        assert acks_after > 0
        assert not load.failures, load.failures[:5]
        with HaFsClient(settings) as fs:
            assert not load.missing(fs)
        gaps = [b - a for a, b in zip(load.ack_times, load.ack_times[1:], strict=False)]
        # No call waited out a timeout and went to another NameNode: the wipe cost no retry.
        assert max(gaps) < LOAD_POLICY.rpc_timeout, f"a {max(gaps):.1f}s gap between acks"
        on_jn1, on_jn3 = finalized(jn1), finalized(jn3)
        common = set(on_jn1) & set(on_jn3)
        assert all(on_jn1[name] == on_jn3[name] for name in common)
        print(
            f"jn-wipe: {len(before)} finalized segments back on jn3 and voting "
            f"{synced_after:.1f}s after the wipe; {acks_after} acks since, longest gap "
            f"between acks {max(gaps):.3f}s, 0 failed calls"
        )
        assert "jn-wipe jn3: ok" in log.read_text()
        down = hadev_down(directory)
        assert down.returncode == 0, down.stderr
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)


def test_jn_wipe_names_what_is_wrong(tmp_path: Path) -> None:
    def jn_wipe(*args: str) -> tuple[int, str]:
        result = CliRunner().invoke(cli, ["jn-wipe", *args])
        return result.exit_code, result.stderr.strip()

    assert jn_wipe("jn1", "--dir", str(tmp_path)) == (1, f"hadev: no dev cluster in {tmp_path}")
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "hadev.json").write_text('{"journalnodes": 3, "namenodes": 2}\n')
    code, err = jn_wipe("jn4", "--dir", str(tmp_path))
    assert (code, err) == (1, f"hadev: no JournalNode 'jn4' in {tmp_path} (known: jn1, jn2, jn3)")
    code, err = jn_wipe("jn2", "--dir", str(tmp_path))
    assert code == 1 and err.startswith(f"hadev: hadev up does not run in {tmp_path}"), err


def test_hadev_up_answers_a_bad_request_and_goes_on(tmp_path: Path) -> None:
    """What ``hadev up``'s loop does with requests it cannot carry out: an answer naming the
    problem, and nothing stopped (no daemon runs here, so none could be)."""
    dev = DevCluster(tmp_path / "dev")
    dev.run_dir.mkdir(parents=True)
    dev.request_path("jn-wipe", "jn9").touch()
    dev.request_path("reboot", "jn1").touch()
    assert dev.serve_requests() == [
        "jn-wipe jn9: error: 'jn9' is not a JournalNode (known: jn1, jn2, jn3)",
        "reboot jn1: error: unknown request 'reboot'",
    ]
    assert sorted(p.name for p in dev.run_dir.iterdir()) == ["jn-wipe.jn9.done", "reboot.jn1.done"]
    assert dev.serve_requests() == []


"""``hadev`` brings back what it started (issue 28 item 5), with real processes: ``hadev up``
in the foreground, then ``hadev stop|start|restart NAME`` from another process, a NameNode
killed with SIGKILL and started again, and a NameNode started by hand on the directory that
``hadev up`` refuses to start beside and ``hadev down`` finds and stops by its lock."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conf import load_settings
from hadev.daemon import CODE_ROOT, child_environment
from hadev.namenodes import hanamenode_command, run_command, run_hafs
from hadev.zookeeper import runs
from tests.chaos.test_dev_cluster import hadev_up

pytestmark = pytest.mark.timeout(300)


def hadev(*args: str) -> subprocess.CompletedProcess[str]:
    return run_command([sys.executable, "-m", "hadev.cli", *args], timeout=120)


def wait_for(what: str, log: Path, proc: subprocess.Popen[bytes], timeout: float = 90.0) -> str:
    deadline = time.monotonic() + timeout
    while what not in (text := log.read_text()):
        assert proc.poll() is None, f"hadev up exited with {proc.returncode}:\n{text}"
        assert time.monotonic() < deadline, f"no {what!r} within {timeout}s:\n{text}"
        time.sleep(0.2)
    return text


def pid_of(directory: Path, name: str) -> int | None:
    try:
        return int((directory / "run" / f"{name}.pid").read_text())
    except FileNotFoundError:
        return None


def addresses(conf: Path) -> dict[str, str]:
    """Every address of the configuration hadev up wrote, by key."""
    raw = load_settings(conf).raw
    found = {k: str(v) for k, v in raw.items() if "-address" in k or "quorum" in k
             or k.startswith("dfs.namenode.shared.edits.dir")}
    assert len(found) == 2 * 3 + 2 * 2 + 2, found  # jn and nn rpc/http, zk, shared edits
    return found


def test_start_stop_restart_and_down_of_a_hand_started_namenode(
    tmp_path: Path,
) -> None:
    directory, conf = tmp_path / "dev", tmp_path / "dev" / "conf" / "ha-site.xml"
    log = tmp_path / "up.out"
    proc = hadev_up(directory, log)
    hand: subprocess.Popen[bytes] | None = None
    try:
        wait_for("Running until Ctrl-C", log, proc)
        first = addresses(conf)
        assert run_hafs(conf, "mkdir", "-p", "/kept").returncode == 0

        # stop, start, restart one daemon; hadev up keeps the others and does not report a
        # daemon it stopped as dead.
        nn2 = pid_of(directory, "nn2")
        assert nn2 is not None
        stopped = hadev("stop", "nn2", "--dir", str(directory))
        assert stopped.returncode == 0, stopped.stderr
        assert stopped.stdout.splitlines()[-1] == f"hadev: nn2 stopped (pid {nn2})"
        assert not runs(nn2, ()) and pid_of(directory, "nn2") is None
        again = hadev("stop", "nn2", "--dir", str(directory))
        assert (again.returncode, again.stderr) == (1, "hadev: nn2: nn2 is not running\n")
        started = hadev("start", "nn2", "--dir", str(directory))
        assert started.returncode == 0, started.stderr
        new_nn2 = pid_of(directory, "nn2")
        assert new_nn2 is not None and new_nn2 != nn2 and runs(new_nn2, ("namenoded", "run"))
        assert started.stdout.splitlines()[-1] == f"hadev: nn2 started (pid {new_nn2})"
        twice = hadev("start", "nn2", "--dir", str(directory))
        assert twice.returncode == 1 and f"nn2 already runs (pid {new_nn2})" in twice.stderr
        jn1 = pid_of(directory, "jn1")
        restarted = hadev("restart", "jn1", "--dir", str(directory))
        assert restarted.returncode == 0, restarted.stderr
        assert pid_of(directory, "jn1") not in (None, jn1)
        unknown = hadev("start", "nn9", "--dir", str(directory))
        assert unknown.returncode == 1
        assert unknown.stderr.startswith("hadev: no daemon 'nn9' in "), unknown.stderr
        assert "nn2 exited" not in log.read_text()

        # A NameNode killed with SIGKILL comes back with hadev start, as standby.
        nn1 = pid_of(directory, "nn1")
        assert nn1 is not None
        os.kill(nn1, signal.SIGKILL)
        wait_for("nn1 killed by SIGKILL", log, proc)
        back = hadev("start", "nn1", "--dir", str(directory))
        assert back.returncode == 0, back.stderr
        assert run_hafs(conf, "ls", "/").returncode == 0
        assert addresses(conf) == first, "a start moved a port"

        down = hadev("down", "--dir", str(directory))
        assert down.returncode == 0, down.stderr
        assert proc.wait(60) == 0

        # A NameNode started by hand on the directory: hadev down finds it by its lock.
        with open(tmp_path / "hand.log", "ab") as out:
            hand = subprocess.Popen(
                [*hanamenode_command("run", "nn1", conf)],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                cwd=CODE_ROOT, env=child_environment(), start_new_session=True,
            )
        lock = directory / "data" / "nn1" / "in_use.lock"
        deadline = time.monotonic() + 60
        while not lock.exists() or f" {hand.pid} " not in Path("/proc/locks").read_text():
            assert hand.poll() is None, (tmp_path / "hand.log").read_text()
            assert time.monotonic() < deadline, "the hand-started NameNode took no lock"
            time.sleep(0.2)
        refused = hadev("up", "--dir", str(directory))
        assert refused.returncode == 1
        assert f"pid {hand.pid} holds {lock}" in refused.stderr, refused.stderr
        found = hadev("down", "--dir", str(directory))
        assert found.returncode == 0, found.stderr
        assert f"stopped pid {hand.pid}, which hadev up had not started" in found.stdout
        assert hand.wait(30) is not None
        assert f" {hand.pid} " not in Path("/proc/locks").read_text()
        # (The next hadev up of the directory takes the same ports: test_dev_cluster.py.)
    finally:
        if hand is not None and hand.poll() is None:
            hand.kill()
            hand.wait(30)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)

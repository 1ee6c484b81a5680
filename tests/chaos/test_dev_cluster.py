"""The one-command local cluster as a user runs it (real processes): ``hadev up`` in the
foreground, ``hafs`` against the configuration it prints, ``hadev down`` from another
process, a second ``up`` that reuses the data, Ctrl-C (SIGINT to its process group); and the
README's first command, ``python -m hadev.demo``, exits 0."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hadev.daemon import CODE_ROOT, child_environment
from hadev.namenodes import run_command, run_hafs
from hadev.zookeeper import runs

pytestmark = pytest.mark.timeout(300)

DAEMONS = ("zk", "jn1", "jn2", "jn3", "nn1", "nn2")


def hadev_up(directory: Path, log: Path) -> subprocess.Popen[bytes]:
    """``hadev up`` in a session of its own (as a terminal's foreground job)."""
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "hadev.cli", "up", "--dir", str(directory)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=CODE_ROOT,
            env=child_environment(),
            start_new_session=True,
        )


def wait_running(proc: subprocess.Popen[bytes], log: Path, timeout: float = 90.0) -> str:
    deadline = time.monotonic() + timeout
    while "Running until Ctrl-C" not in (text := log.read_text()):
        assert proc.poll() is None, f"hadev up exited with {proc.returncode}:\n{text}"
        assert time.monotonic() < deadline, f"hadev up did not start in {timeout}s:\n{text}"
        time.sleep(0.2)
    return text


def pids(directory: Path) -> dict[str, int]:
    return {p.stem: int(p.read_text()) for p in (directory / "run").glob("*.pid")}


def hadev_down(directory: Path) -> subprocess.CompletedProcess[str]:
    return run_command([sys.executable, "-m", "hadev.cli", "down", "--dir", str(directory)])


def alive(pid: int) -> bool:
    return runs(pid, ())  # any command line: a process that has not exited


def test_hadev_up_down_reuse_and_ctrl_c(tmp_path: Path) -> None:
    directory, log = tmp_path / "dev", tmp_path / "hadev.out"
    conf = directory / "conf" / "ha-site.xml"
    proc = hadev_up(directory, log)
    try:
        text = wait_running(proc, log)
        assert f"export HANAMENODE_CONF={conf}" in text
        running = pids(directory)
        assert set(running) == {"hadev", *DAEMONS}, running
        ports = (directory / "conf" / "ports.json").read_text()
        assert run_hafs(conf, "mkdir", "-p", "/kept/across/runs").returncode == 0
        down = hadev_down(directory)
        assert down.returncode == 0, down.stderr
        assert proc.wait(60) == 0
        assert not pids(directory), "pid files left after hadev down"
        for name, pid in running.items():
            assert not alive(pid), f"{name} (pid {pid}) still runs after hadev down"
        again = hadev_down(directory)
        assert again.returncode == 0 and "nothing runs" in again.stdout

        log = tmp_path / "hadev-again.out"
        proc = hadev_up(directory, log)
        text = wait_running(proc, log)
        assert "reusing the dev cluster" in text
        # The same ports as the first run (issue 28 item 5): bookmarked pages stay good.
        assert (directory / "conf" / "ports.json").read_text() == ports
        for port in (p for pair in json.loads(ports).values() for p in pair):
            assert f":{port}<" in conf.read_text() or f":{port};" in conf.read_text(), port
        listing = run_hafs(conf, "ls", "-R", "/kept")
        assert "/kept/across/runs" in listing.stdout, listing
        running = pids(directory)
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in its terminal does
        assert proc.wait(60) == 0
        assert "stopped; data kept" in log.read_text()
        for name, pid in running.items():
            assert not alive(pid), f"{name} (pid {pid}) still runs after Ctrl-C"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)


def test_the_readme_demo_exits_zero() -> None:
    started = time.monotonic()
    result = run_command([sys.executable, "-m", "hadev.demo"], timeout=120)
    took = time.monotonic() - started
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    assert "every acknowledged directory is present" in result.stdout
    assert "demo finished" in result.stdout
    assert took < 60, f"the demo took {took:.0f}s"

"""Idle connections are a bounded resource (issue 25 item 2; docs/operations.md §9.4), on a
dev cluster of real processes with mutual TLS: ZooKeeper, three JournalNodes, two NameNodes.

The flood is what the issue's attacker did: plain TCP connections that never start their
TLS handshake (no certificate needed), held by other processes (``idle_holder``).

1. ``--idle-connections`` (default 1000; the issue used 20,000) to the active NameNode and
   to two JournalNodes, while a client writes: every daemon closes them by itself (the
   handshake timeout, 2 s here; before, gRPC kept them for 120 s), and each daemon gives
   back most of the memory they took (at most half of the growth, or 16 MiB, remains). A
   second wave to the JournalNodes, and the active is killed (SIGKILL) while it is held: the
   standby becomes active and the client's writes go on, and every write acknowledged before
   or after is there. (A flood of the active may move the lock by itself, as in 2.)
2. An active that cannot accept connections (its descriptor limit lowered with ``prlimit``
   and kept full by a holder that reopens what the handshake timeout closes): its elector's
   health check, which also calls it on a fresh connection, finds it unreachable, so it gives
   up the lock and the standby takes over (before, it stayed active and nothing was logged).
   It says so in its log; once the flood ends it serves again, as a standby.

The figures are printed (connections held, seconds without an acknowledged write, RSS
before and after); they are not asserted as times.
"""

from __future__ import annotations

import json
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hadev.daemon import CODE_ROOT, child_environment
from hadev.devcluster import DevCluster
from hanamenode.client import HaFsClient
from hanamenode.errors import NamenodeError
from hanamenode.ha import HAState

pytestmark = pytest.mark.timeout(900)

RSS_FLOOR = 16 * 1024 * 1024
"""Growth any daemon may keep after a flood (the allocator's own caches, a few writes)."""


def given_back(baseline: int, peak: int, after: int) -> bool:
    """Whether a daemon gave back most of what a flood took: after it, at most half of the
    growth remains, or ``RSS_FLOOR``. The issue's 20,000 connections took 1.3 GB (about 50 KB
    each) and over 1 GB remained a minute later; glibc kept the freed arenas."""
    return after - baseline <= max(RSS_FLOOR, (peak - baseline) // 2)
SHED_TIMEOUT = 90.0
"""Generous: the handshake timeout is 5 s; a loaded machine accepts 20,000 slowly."""


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS in /proc/{pid}/status")


def mib(n: int) -> str:
    return f"{n / (1024 * 1024):.1f} MiB"


PER_PROCESS = 8000
"""Connections one holder process opens: each has its own descriptor limit."""


class Holder:
    """``count`` connections to ``address`` from ``tests.process.idle_holder`` processes
    (``PER_PROCESS`` each); ``last`` sums their latest reports."""

    def __init__(self, address: str, count: int, *, refill: bool = False) -> None:
        host, port = address.rsplit(":", 1)
        self.address = address
        self.count = count
        shares = [PER_PROCESS] * (count // PER_PROCESS)
        if count % PER_PROCESS:
            shares.append(count % PER_PROCESS)
        self.procs = [
            subprocess.Popen(
                [sys.executable, "-m", "tests.process.idle_holder", host, port, str(share),
                 *(["--refill"] if refill else [])],
                stdout=subprocess.PIPE,
                text=True,
                cwd=CODE_ROOT,
                env=child_environment(),
            )
            for share in shares
        ]
        self._reports: list[dict[str, Any]] = [
            {"opened": 0, "held": 0, "closed_by_server": 0} for _ in self.procs
        ]
        self.peak_held = 0
        for i, proc in enumerate(self.procs):
            threading.Thread(target=self._read, args=(i, proc), daemon=True).start()

    @property
    def last(self) -> dict[str, int]:
        reports = list(self._reports)
        return {k: sum(r[k] for r in reports) for k in ("opened", "held", "closed_by_server")}

    def _read(self, index: int, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self._reports[index] = json.loads(line)
            self.peak_held = max(self.peak_held, self.last["held"])

    def wait(self, what: str, done: Callable[[dict[str, Any]], bool], timeout: float) -> float:
        """Seconds until ``done(last report)``; fails naming ``what`` after ``timeout``."""
        start = time.monotonic()
        while not done(self.last):
            assert all(p.poll() is None for p in self.procs), f"holder of {self.address} exited"
            assert time.monotonic() - start < timeout, f"{self.address}: {what}: {self.last}"
            time.sleep(0.1)
        return time.monotonic() - start

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


class Writer:
    """A client creating ``/flood/w<i>`` one after another; ``acked`` holds (time, path)."""

    def __init__(self, dev: DevCluster) -> None:
        self.client = HaFsClient(dev.settings())
        self.acked: list[tuple[float, str]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="flood-writer", daemon=True)

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            path = f"/flood/w{i}"
            try:
                self.client.mkdirs(path, parents=True)
                self.acked.append((time.monotonic(), path))
            except NamenodeError as exc:  # the failover proxy gave up: noted, then go on
                self.errors.append(f"{path}: {type(exc).__name__}: {exc}")
            i += 1
            time.sleep(0.02)

    def start(self) -> Writer:
        self._thread.start()
        return self

    def first_ack_after(self, t: float, timeout: float) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            later = [at for at, _ in list(self.acked) if at > t]
            if later:
                return later[0]
            time.sleep(0.05)
        raise AssertionError(f"no write acknowledged within {timeout} s: {self.errors[-3:]}")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)
        self.client.close()


def test_an_idle_flood_is_shed_and_a_failover_goes_on(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    count = int(request.config.getoption("--idle-connections"))
    # A shorter handshake timeout than the default 5 s keeps the test short; the key's
    # plumbing is the same (tests/cluster/test_rpc_connection_bounds.py checks it too).
    fast = {"hanamenode.rpc.handshake-timeout.ms": 2000}
    with DevCluster(tmp_path, session_timeout=1.0, quorum_timeout="4s", extra_conf=fast) as dev:
        active = dev.wait_active()
        jn1, jn2 = dev.journalnodes[0], dev.journalnodes[1]
        daemons = {active: dev.namenode(active), "jn1": jn1, "jn2": jn2}
        pids = {name: d.pid for name, d in daemons.items()}
        writer = Writer(dev).start()
        holders: list[Holder] = []
        try:
            writer.first_ack_after(time.monotonic(), timeout=30)
            baseline = {name: rss(pid) for name, pid in pids.items()}

            # Wave 1: the active and two JournalNodes; each sheds its connections.
            holders = [Holder(d.address, count) for d in daemons.values()]
            opened = {}
            for holder in holders:
                holder.wait("not all opened", lambda r: r["opened"] >= count, SHED_TIMEOUT)
            all_open = time.monotonic()
            peak = {name: rss(pid) for name, pid in pids.items()}
            shed = {}
            for name, holder in zip(daemons, holders, strict=True):
                holder.wait(
                    "connections still held by the daemon",
                    lambda r: r["opened"] >= count and r["held"] == 0,
                    SHED_TIMEOUT,
                )
                shed[name] = time.monotonic() - all_open
                opened[name] = holder.peak_held
                holder.stop()
            time.sleep(2.0)  # the allocator returns what the connections held
            after = {name: rss(pid) for name, pid in pids.items()}
            for name in daemons:
                print(
                    f"{name}: {opened[name]} idle connections held at most, all closed by it "
                    f"by {shed[name]:.1f} s after the last was opened; RSS "
                    f"{mib(baseline[name])} before, {mib(peak[name])} flooded, "
                    f"{mib(after[name])} after"
                )
            for name in daemons:
                assert given_back(baseline[name], peak[name], after[name]), (
                    name, baseline, peak, after
                )

            # Wave 2: the JournalNodes flooded again, and the active killed meanwhile.
            holders = [Holder(d.address, count) for d in (jn1, jn2)]
            for holder in holders:
                holder.wait("not all opened", lambda r: r["opened"] >= count, SHED_TIMEOUT)
            # The flood of wave 1 may have moved the lock already (an active that cannot be
            # reached gives it up): kill whichever is active now.
            victim = dev.wait_active()
            held = [h.last["held"] for h in holders]
            killed = time.monotonic()
            dev.kill(victim, signal.SIGKILL)
            new_active = dev.wait_active(exclude=victim, timeout=120)
            first = writer.first_ack_after(killed, timeout=120)
            print(
                f"failover under {held} idle connections to two JournalNodes: "
                f"{first - killed:.2f} s from SIGKILL of {victim} to the first write "
                f"acknowledged by {new_active} (the active of wave 1 was {active})"
            )
            for holder in holders:
                holder.wait("connections still held", lambda r: r["held"] == 0, SHED_TIMEOUT)
            writer.first_ack_after(time.monotonic(), timeout=60)  # writes go on
        finally:
            for holder in holders:
                holder.stop()
            writer.stop()
        print(f"writes acknowledged: {len(writer.acked)}, gave up: {len(writer.errors)}")
        with HaFsClient(dev.settings()) as fs:
            listed = {s.path for s in fs.list("/flood")}
        missing = [p for _, p in writer.acked if p not in listed]
        assert not missing, f"acknowledged writes lost: {missing[:10]}"


def test_an_active_that_cannot_accept_connections_gives_up_the_lock(tmp_path: Path) -> None:
    extra = {"ha.health-monitor.rpc-timeout.ms": 2000}
    with DevCluster(tmp_path, session_timeout=1.0, quorum_timeout="4s", extra_conf=extra) as dev:
        active = dev.wait_active()
        standby = next(nn for nn in dev.namenode_ids if nn != active)
        proc = dev.namenode(active)
        with HaFsClient(dev.settings()) as fs:
            fs.mkdirs("/before", parents=True)
        # Room for what it holds now and a few more: the holder then takes the rest.
        in_use = len(list(Path(f"/proc/{proc.pid}/fd").iterdir()))
        limit = in_use + 40
        # The soft limit only: raising a hard limit again needs CAP_SYS_RESOURCE.
        before = resource.prlimit(proc.pid, resource.RLIMIT_NOFILE)
        resource.prlimit(proc.pid, resource.RLIMIT_NOFILE, (limit, before[1]))
        holder = Holder(proc.address, limit + 100, refill=True)
        try:
            flooded = time.monotonic()
            new_active = dev.wait_active(exclude=active, timeout=120)
            took = time.monotonic() - flooded
            assert new_active == standby
            print(
                f"{active} at its descriptor limit ({limit}) with {holder.last['held']} idle "
                f"connections held: {new_active} active {took:.2f} s after the flood began"
            )
            with HaFsClient(dev.settings()) as fs:
                fs.mkdirs("/after", parents=True)
                assert fs.stat("/before").is_dir
            # fd-watch counts once a second: the lock may have moved before it did.
            deadline = time.monotonic() + 15
            text = dev.log_path(active).read_text()
            while "cannot accept new connections" not in text and time.monotonic() < deadline:
                time.sleep(0.2)
                text = dev.log_path(active).read_text()
            assert "cannot accept new connections" in text, text[-3000:]
            assert "fresh connection" in text, text[-3000:]
        finally:
            holder.stop()
        # The flood gone, it serves again, as the standby.
        resource.prlimit(proc.pid, resource.RLIMIT_NOFILE, before)
        dev.wait_state(active, HAState.STANDBY, timeout=60)
        assert dev.active() == new_active

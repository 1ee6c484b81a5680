"""kill -9 of the active NameNode process while clients pipeline calls and multis on sessions
(docs/protocol.md §13, docs/consistency.md §10-§11). Real processes, real signals.

Three clients, each an ``HaFsClient`` shared by three threads (one session per NameNode per
client): two threads make directories without ``-p`` (a call that ran twice would be refused
with PathExistsError), one sends multis of a mkdir and ``FILES`` creates under it. At a random
moment the active is killed and the standby made active. Then:

- no call failed: every call in flight when the session broke was resent to the new active
  with its ids and answered once (a mkdir that ran twice would have raised);
- every acknowledged directory and multi is on the new active;
- every multi directory there, acknowledged or not, is whole: a mkdir and all its files, never
  part of them; and the same holds, with the same tree, on the observer and on the killed
  NameNode restarted from its image and the log.
"""

from __future__ import annotations

import random
import signal
import threading
import time
from pathlib import Path

import pytest

from hadev.namenodes import NameNodeProcessCluster
from hanamenode.client import CreateOp, HaFsClient, MkdirsOp, RetryPolicy
from hanamenode.namespace import StatInfo

pytestmark = pytest.mark.timeout(240)

FILES = 10
CONF: dict[str, str | int | float | bool] = {
    "dfs.ha.tail-edits.period": "0.1",
    "dfs.ha.tail-edits.in-progress": True,
    "dfs.ha.log-roll.period": "0.5",
    "dfs.qjournal.heartbeat.interval.ms": "200",
}
# Long enough to outlast the kill and the manual transition: no call may give up meanwhile.
PATIENT = RetryPolicy(max_attempts=200, sleep_base=0.02, sleep_max=0.1, rpc_timeout=5.0)


def multi_dir(client: int, n: int) -> str:
    return f"/multi/c{client}-{n}"


def test_kill_9_under_sessions_and_multis_loses_nothing_and_splits_no_multi(
    tmp_path: Path,
) -> None:
    seed = random.SystemRandom().randrange(2**32)
    rng = random.Random(seed)
    print(f"seed={seed}")
    with NameNodeProcessCluster(tmp_path, namenodes=3, observers=1, extra_conf=CONF) as cluster:
        cluster.transition_to_active("nn1")
        settings = cluster.settings()
        with HaFsClient(settings, policy=PATIENT) as setup:
            setup.mkdirs("/plain", parents=True)
            setup.mkdirs("/multi", parents=True)
        stop = threading.Event()
        acked_dirs: list[str] = []
        acked_multis: list[str] = []
        failures: list[str] = []
        clients = [HaFsClient(settings, policy=PATIENT) for _ in range(3)]
        assert all(c.proxy.sessions for c in clients)

        def mkdirs(c: int, t: int) -> None:
            n = 0
            while not stop.is_set():
                path = f"/plain/c{c}-t{t}-{n}"
                try:
                    clients[c].mkdirs(path)
                except Exception as exc:  # any failure breaks the promise under test
                    failures.append(f"{path}: {type(exc).__name__}: {exc}")
                    return
                acked_dirs.append(path)
                n += 1

        def multis(c: int) -> None:
            n = 0
            while not stop.is_set():
                top = multi_dir(c, n)
                ops = [MkdirsOp(top), *(CreateOp(f"{top}/f{i}") for i in range(FILES))]
                try:
                    results = clients[c].multi(ops)
                except Exception as exc:
                    failures.append(f"{top}: {type(exc).__name__}: {exc}")
                    return
                assert results[0] is True and len(results) == FILES + 1
                acked_multis.append(top)
                n += 1

        threads = [threading.Thread(target=mkdirs, args=(c, t)) for c in range(3) for t in (0, 1)]
        threads += [threading.Thread(target=multis, args=(c,)) for c in range(3)]
        for t in threads:
            t.start()
        try:
            time.sleep(rng.uniform(1.0, 2.5))
            before = (len(acked_dirs), len(acked_multis))
            cluster["nn1"].kill(signal.SIGKILL)
            cluster.transition_to_active("nn2")
            time.sleep(1.5)
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=60)
            for c in clients:
                c.close()
        assert not failures, f"seed={seed}: {failures[:3]}"
        assert before[0] > 0 and before[1] > 0, f"seed={seed}: nothing acknowledged before"
        assert (len(acked_dirs), len(acked_multis)) > before, "nothing acknowledged after"

        with HaFsClient(settings, policy=PATIENT) as fs:
            plain = {s.path for s in fs.list("/plain")}
            lost = [p for p in acked_dirs if p not in plain]
            assert not lost, f"seed={seed}: acknowledged mkdirs lost: {lost[:5]}"
            active_tree = whole_multis(fs, seed, "nn2")
            lost = [m for m in acked_multis if m not in active_tree]
            assert not lost, f"seed={seed}: acknowledged multis lost: {lost[:5]}"
            txid = fs.msync()

        # The observer, and the killed NameNode restarted from its image and the log.
        cluster["nn1"].restart()
        for nn in ("nn3", "nn1"):
            address = cluster[nn].address
            with HaFsClient([address], policy=PATIENT, tls=settings.tls,
                            allow_stale_read=True) as pinned:
                deadline = time.monotonic() + 30
                while pinned.proxy.seen_txid < txid and time.monotonic() < deadline:
                    pinned.stat("/")  # a stale read's answer carries the txid it reflects
                    time.sleep(0.1)
                assert pinned.proxy.seen_txid >= txid, f"{nn} did not catch up to {txid}"
                assert whole_multis(pinned, seed, nn) == active_tree, nn


def whole_multis(fs: HaFsClient, seed: int, nn: str) -> dict[str, tuple[StatInfo, ...]]:
    """Every multi directory on ``fs``'s NameNode with its files; each must be whole."""
    tree: dict[str, tuple[StatInfo, ...]] = {}
    for entry in fs.list("/multi"):
        files = tuple(fs.list(entry.path))
        names = sorted(s.path.rsplit("/", 1)[1] for s in files)
        assert names == sorted(f"f{i}" for i in range(FILES)), (
            f"seed={seed}: {nn} holds part of the multi {entry.path}: {names}"
        )
        tree[entry.path] = files
    return tree

"""The clients of a ``hachaos`` run: ``clients`` threads, each with its own ``HaFsClient``
(its own failover proxy), running ``mkdir`` (with and without ``-p``), ``create``,
``delete``, ``stat`` and ``ls`` on a few keys (``/chaos/k0`` ...: siblings, so each key is
an independent object), every invocation and completion written to the history.

Beside the keys, each client now and then makes a directory of its own that nothing deletes
(``/chaos-acks/c<i>-<n>``); the acknowledged ones are written to the history as ``ack`` lines
and must all be present at the end.

**Pinned readers** (``pinned``, default 2) are more client threads, each bound to one
NameNode (round robin) with no failover, running only ``stat`` and ``ls``. A failover
proxy sticks to the NameNode that answered last, so once its clients have moved on, nobody
would ask a deposed active what it still answers; Jepsen binds clients to nodes for the same
reason. Their refusals (StandbyError) and timeouts are indeterminate reads, which the checker
drops.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from conf import Settings
from hachaos.history import History
from hanamenode.client import HaFsClient, RetryPolicy
from hanamenode.errors import NamenodeError
from hanamenode.peers import connect_address

__all__ = ["ACKS", "CHAOS_POLICY", "ROOT", "Workload", "key_path"]

log = structlog.get_logger(__name__)

ROOT = "/chaos"
ACKS = "/chaos-acks"
CHAOS_POLICY = RetryPolicy(max_attempts=12, sleep_base=0.02, sleep_max=0.25, rpc_timeout=2.0)
"""A client rides through a failover (about 20 s of attempts) but gives up on a NameNode
that does not answer within 2 s; a call that gives up is indeterminate."""
PINNED_POLICY = RetryPolicy(max_attempts=1, rpc_timeout=2.0)
"""One attempt, on its own NameNode only."""
OPERATIONS = (("mkdir", 3), ("create", 2), ("delete", 3), ("stat", 3), ("ls", 2))
READS = (("stat", 1), ("ls", 1))
REFUSED_PAUSE = 0.05
"""A pinned reader whose NameNode refused waits this long before asking again."""
ACK_RATE = 0.1


def key_path(key: str) -> str:
    return f"{ROOT}/{key}"


@dataclass
class Counts:
    ok: int = 0
    info: int = 0
    acks: int = 0


class Workload:
    """The client threads; ``start`` makes the roots (retrying until a NameNode is active),
    ``stop`` ends each thread after its call in flight."""

    def __init__(
        self,
        settings: Settings,
        history: History,
        *,
        clients: int = 8,
        keys: int = 5,
        seed: int = 0,
        policy: RetryPolicy = CHAOS_POLICY,
        pause: float = 0.0,
        pinned: int = 2,
        sessions: bool = True,
    ) -> None:
        self.settings = settings
        self.history = history
        self.clients = clients
        self.keys = [f"k{i}" for i in range(keys)]
        self.seed = seed
        self.policy = policy
        self.pause = pause
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.pinned = pinned
        self.sessions = sessions
        self.counts = [Counts() for _ in range(clients + pinned)]
        self.acked: list[str] = []
        self._lock = threading.Lock()

    def start(self) -> Workload:
        with HaFsClient(self.settings, policy=RetryPolicy(max_attempts=100, rpc_timeout=5.0)) as fs:
            fs.mkdirs(ROOT, parents=True)
            fs.mkdirs(ACKS, parents=True)
        for index in range(self.clients):
            thread = threading.Thread(
                target=self._run, args=(index,), name=f"chaos-client-{index}", daemon=True
            )
            self._threads.append(thread)
            thread.start()
        for index in range(self.clients, self.clients + self.pinned):
            nn = self.settings.namenode_ids[index % len(self.settings.namenode_ids)]
            thread = threading.Thread(
                target=self._read_pinned, args=(index, nn), name=f"chaos-reader-{nn}", daemon=True
            )
            self._threads.append(thread)
            thread.start()
        return self

    @property
    def processes(self) -> int:
        """Client threads of both kinds: process ids ``0 .. processes - 1``."""
        return self.clients + self.pinned

    def _read_pinned(self, index: int, nn: str) -> None:
        rng = random.Random(self.seed * 1000 + index)
        names = [name for name, _ in READS]
        weights = [weight for _, weight in READS]
        address = connect_address(self.settings.namenode(nn).rpc_address)
        with HaFsClient(
            [address], policy=PINNED_POLICY, tls=self.settings.tls, sessions=self.sessions
        ) as fs:
            while not self._stop.is_set():
                f = rng.choices(names, weights)[0]
                key = "" if f == "ls" else rng.choice(self.keys)
                if not self._call(fs, index, f, key, False):
                    self._stop.wait(REFUSED_PAUSE)

    def _run(self, index: int) -> None:
        rng = random.Random(self.seed * 1000 + index)
        names = [name for name, _ in OPERATIONS]
        weights = [weight for _, weight in OPERATIONS]
        marks = 0
        with HaFsClient(self.settings, policy=self.policy, sessions=self.sessions) as fs:
            while not self._stop.is_set():
                if rng.random() < ACK_RATE:
                    marks += 1
                    self._mark(fs, f"{ACKS}/c{index}-{marks}", index)
                    continue
                f = rng.choices(names, weights)[0]
                key = "" if f == "ls" else rng.choice(self.keys)
                parents = f == "mkdir" and rng.random() < 0.5
                self._call(fs, index, f, key, parents)
                if self.pause:
                    self._stop.wait(self.pause)

    def _call(self, fs: HaFsClient, index: int, f: str, key: str, parents: bool) -> bool:
        """One call, recorded; whether it was answered."""
        path = key_path(key)
        calls: dict[str, Callable[[], object]] = {
            "mkdir": lambda: fs.mkdirs(path, parents=parents),
            "create": lambda: fs.create(path),
            "delete": lambda: fs.delete(path),
            "stat": lambda: fs.stat(path),
            "ls": lambda: fs.list(ROOT),
        }
        result = self.history.record(index, key, f, calls[f], parents=parents)
        counts = self.counts[index]
        if result[0] == "ok":
            counts.ok += 1
        else:
            counts.info += 1
        return result[0] == "ok"

    def _mark(self, fs: HaFsClient, path: str, index: int) -> None:
        try:
            fs.mkdirs(path)
        except NamenodeError as exc:
            log.info("mark not acknowledged", path=path, error=f"{type(exc).__name__}: {exc}")
            return
        self.history.note({"type": "ack", "process": index, "path": path})
        with self._lock:
            self.acked.append(path)
            self.counts[index].acks += 1

    def stop(self, timeout: float = 120.0) -> list[str]:
        """Stop the clients; the names of those still in a call after ``timeout``."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout)
        return [t.name for t in self._threads if t.is_alive()]

    @property
    def ok(self) -> int:
        return sum(c.ok for c in self.counts)

    @property
    def indeterminate(self) -> int:
        return sum(c.info for c in self.counts)

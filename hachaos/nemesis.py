"""The nemeses of ``hachaos``: what faults a run injects, when, and for how long.

``schedule`` is pure: from a seed, the selected faults, the run's length and the session
timeout it draws one fault at a time (a quiet spell, the fault, its healing), so the same
``--seed`` and ``--nemesis`` replay the same schedule. Targets are roles ("the active",
"the standby", "JournalNode 2", "these hosts against those"), resolved when the fault
starts. ``Nemesis`` is the thin shell that applies a schedule to a running cluster in a
thread and writes each start and heal into the history.

=================== ==================================================================
fault               what it does, and what heals it
=================== ==================================================================
kill                ``kill -9`` of the active NameNode; restarted after the duration
kill-standby        ``kill -9`` of a standby NameNode; restarted after the duration
kill-jn             ``kill -9`` of a JournalNode; restarted after the duration
pause               SIGSTOP of the active NameNode, longer than the session timeout;
                    SIGCONT
partition-zk        the active cut from ZooKeeper only
partition-jns       the active cut from every JournalNode only
partition-active    the active cut from every other daemon (its clients still reach it)
partition-halves    the daemons split in two random groups (clients reach everyone)
partition-jn        one JournalNode cut from everyone
disk-full           one JournalNode's journal disk (a small tmpfs) filled to the last
                    byte; the filler file removed
power-cut           the power of one JournalNode, of the active NameNode, or of the whole
                    rack (every JournalNode and NameNode) cut at once: SIGKILL, and their
                    disks (``hadev.crashfs`` mounts) lose what was never fsynced, half of
                    the cuts with a torn write; powered on (remounted, restarted) after the
                    duration (docs/protocol.md §14)
=================== ==================================================================

With the ZooKeeper journal (``--journal zookeeper``, docs/architecture.md §9.2) there is no
JournalNode: the faults aimed at JournalNodes (``JOURNALNODE_FAULTS``) and ``power-cut`` (not
yet run against the NameNodes' packed segments) do not apply. ``all`` leaves them out, and
naming one is refused. ``partition-zk`` then cuts the active from its journal as well as from
the election: it can neither append nor answer a read-index round until it is healed.
"""

from __future__ import annotations

import contextlib
import enum
import random
import signal
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import structlog

from hadev.devcluster import JOURNALS

__all__ = [
    "JOURNALNODE_FAULTS",
    "JOURNALS",
    "ClusterControl",
    "Fault",
    "Nemesis",
    "PowerControl",
    "Step",
    "applicable_faults",
    "parse_faults",
    "schedule",
]

log = structlog.get_logger(__name__)


class Fault(enum.Enum):
    KILL = "kill"
    KILL_STANDBY = "kill-standby"
    KILL_JN = "kill-jn"
    PAUSE = "pause"
    PARTITION_ZK = "partition-zk"
    PARTITION_JNS = "partition-jns"
    PARTITION_ACTIVE = "partition-active"
    PARTITION_HALVES = "partition-halves"
    PARTITION_JN = "partition-jn"
    DISK_FULL = "disk-full"
    POWER_CUT = "power-cut"


JOURNALNODE_FAULTS = frozenset(
    {Fault.KILL_JN, Fault.PARTITION_JNS, Fault.PARTITION_JN, Fault.DISK_FULL}
)
"""The faults aimed at JournalNodes: none to aim at with the ZooKeeper journal."""


def applicable_faults(journal: str) -> tuple[Fault, ...]:
    """The faults that apply to a cluster on ``journal`` (what ``all`` means there), in the
    order of ``Fault``. With the ZooKeeper journal: no JournalNode fault, and no
    ``power-cut`` (its cuts of JournalNodes have nothing to hit, and the NameNodes' packed
    segments on crash filesystems are not covered yet)."""
    if journal not in JOURNALS:
        raise ValueError(f"unknown journal {journal!r}; known: {', '.join(JOURNALS)}")
    if journal == "qjm":
        return tuple(Fault)
    return tuple(f for f in Fault if f not in JOURNALNODE_FAULTS and f is not Fault.POWER_CUT)


def parse_faults(text: str, journal: str = "qjm") -> tuple[Fault, ...]:
    """``kill,pause`` or ``all`` (or ``none``): the faults, in the order of ``Fault``;
    ``all`` is every fault that applies to ``journal``. ValueError naming an unknown one
    and listing the known, or naming a fault that does not apply to ``journal``."""
    applicable = applicable_faults(journal)
    names = [n.strip() for n in text.split(",") if n.strip()]
    if names == ["all"]:
        return applicable
    if names in ([], ["none"]):
        return ()
    known = {f.value: f for f in Fault}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(
            f"unknown nemesis {', '.join(unknown)}; known: all, none, {', '.join(known)}"
        )
    refused = [n for n in names if known[n] not in applicable]
    if refused:
        why = (
            "it has no JournalNode"
            if all(known[n] in JOURNALNODE_FAULTS for n in refused)
            else "it has no JournalNode, and power cuts of the NameNodes' packed segments "
            "are not covered yet"
        )
        raise ValueError(
            f"nemesis {', '.join(refused)} does not apply to the {journal} journal ({why}); "
            f"these do: {', '.join(f.value for f in applicable)}"
        )
    return tuple(f for f in Fault if f.value in names)


@dataclass(frozen=True, slots=True)
class Step:
    """One fault: it starts ``at`` seconds into the run and is healed ``duration`` seconds
    later. ``choice`` picks among equals: which JournalNode (modulo their number), or, for
    halves, which daemons go to the first group (bit i: the i-th daemon)."""

    at: float
    fault: Fault
    duration: float
    choice: int

    def describe(self) -> str:
        return f"{self.at:7.2f}s {self.fault.value} for {self.duration:.2f}s (choice {self.choice})"


def schedule(
    seed: int,
    faults: Sequence[Fault],
    total: float,
    session_timeout: float,
    *,
    warmup: float = 2.0,
    quiet: tuple[float, float] = (1.0, 3.0),
) -> tuple[Step, ...]:
    """The faults of a run of ``total`` seconds, one at a time, none starting in the first
    ``warmup`` seconds and each healed before the run ends. A pause outlasts the ZooKeeper
    session (1.5-4 session timeouts), so the paused active loses its lock.

    >>> [s.fault.value for s in schedule(1, [Fault.KILL], 20.0, 1.0)][:2]
    ['kill', 'kill']
    """
    if not faults:
        return ()
    rng = random.Random(seed)
    steps: list[Step] = []
    t = warmup
    while True:
        t += rng.uniform(*quiet)
        fault = rng.choice(list(faults))
        if fault is Fault.PAUSE:
            duration = session_timeout * rng.uniform(1.5, 4.0)
        elif fault in (Fault.KILL, Fault.KILL_STANDBY, Fault.KILL_JN, Fault.POWER_CUT):
            duration = rng.uniform(0.2, 3.0)
        else:
            duration = rng.uniform(max(2.0, 2 * session_timeout), 6.0)
        choice = rng.randrange(1 << 16)
        if t + duration > total:
            return tuple(steps)
        steps.append(Step(round(t, 3), fault, round(duration, 3), choice))
        t += duration


# -- the shell --------------------------------------------------------------------------------


class ClusterControl(Protocol):
    """What the nemesis needs from a cluster (``hachaos.cluster.ChaosCluster`` has it)."""

    namenode_ids: list[str]
    journalnode_ids: list[str]
    disk_jn: str | None

    def active(self) -> str | None: ...
    def kill(self, name: str, sig: int) -> None: ...
    def restart(self, name: str) -> None: ...
    def running(self, name: str) -> bool: ...
    def partition(self, groups: Iterable[Iterable[str]]) -> None: ...
    def heal_network(self) -> None: ...
    def fill_disk(self, jn_id: str) -> None: ...
    def free_disk(self, jn_id: str) -> None: ...


@runtime_checkable
class PowerControl(Protocol):
    """What the ``power-cut`` nemesis needs besides ``ClusterControl``: daemons whose
    storage is on crash filesystems (``crash_mounted``: none unless the run has that
    fault), the cut and the power-on."""

    crash_mounted: list[str]

    def power_cut(self, names: Sequence[str], *, torn: bool, seed: int) -> str: ...
    def power_on(self, names: Sequence[str]) -> None: ...


ACTIVE_WAIT = 10.0
"""Seconds a fault aimed at the active NameNode waits for one to be elected before it is
skipped (the skip is in the history)."""
ACTIVE_POLL = 0.1


class Nemesis:
    """Applies ``steps`` to ``cluster`` in a thread, from ``started`` (a ``time.monotonic``
    instant) on; ``record(event)`` gets each start, heal and skip. ``stop`` heals whatever
    is still broken and restarts any daemon that is not running.

        with Nemesis(cluster, steps, history.note, started):
            time.sleep(run_time)
    """

    def __init__(
        self,
        cluster: ClusterControl,
        steps: Sequence[Step],
        record: Callable[[dict[str, Any]], None],
        started: float,
    ) -> None:
        self.cluster = cluster
        self.steps = list(steps)
        self.record = record
        self.started = started
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="nemesis", daemon=True)
        self._heal: Callable[[], None] | None = None
        self.applied = 0
        self.errors: list[str] = []

    def __enter__(self) -> Nemesis:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        for step in self.steps:
            if self._stop.wait(max(0.0, self.started + step.at - time.monotonic())):
                return
            try:
                target, heal = self._apply(step)
            except Exception as exc:  # the run goes on; the failure is in the report
                self._error(step, "start", exc)
                continue
            if heal is None:
                self.record(
                    {
                        "type": "nemesis",
                        "fault": step.fault.value,
                        "phase": "skip",
                        "target": target,
                    }
                )
                continue
            self.applied += 1
            self._heal = heal
            self.record(
                {
                    "type": "nemesis",
                    "fault": step.fault.value,
                    "phase": "start",
                    "target": target,
                    "duration": step.duration,
                }
            )
            self._stop.wait(step.duration)
            self._heal = None
            try:
                heal()
            except Exception as exc:
                self._error(step, "heal", exc)
            self.record(
                {"type": "nemesis", "fault": step.fault.value, "phase": "heal", "target": target}
            )
            if self._stop.is_set():
                return

    def _error(self, step: Step, phase: str, exc: Exception) -> None:
        message = f"{step.describe()}: {phase} failed: {type(exc).__name__}: {exc}"
        self.errors.append(message)
        log.error("nemesis step failed", step=step.describe(), phase=phase, error=str(exc))
        self.record(
            {
                "type": "nemesis",
                "fault": step.fault.value,
                "phase": f"{phase}-failed",
                "error": f"{type(exc).__name__}: {exc}",
            }
        )

    def _await_active(self) -> str | None:
        """The active NameNode, waiting up to ``ACTIVE_WAIT`` seconds for one: a fault that
        aims at the active often comes right after one that deposed it (a partition, a kill),
        while the election is still on."""
        deadline = time.monotonic() + ACTIVE_WAIT
        while True:
            active = self.cluster.active()
            if active is not None or time.monotonic() >= deadline:
                return active
            if self._stop.wait(ACTIVE_POLL):
                return None

    def _apply(self, step: Step) -> tuple[str, Callable[[], None] | None]:
        """Start ``step``'s fault: (its target, the function that heals it), or (why not,
        None) when there is nothing to hit (no active NameNode elected in time)."""
        c = self.cluster
        fault = step.fault
        if fault in JOURNALNODE_FAULTS and not c.journalnode_ids:
            return "no JournalNode (the ZooKeeper journal)", None
        if fault in (
            Fault.KILL,
            Fault.PAUSE,
            Fault.PARTITION_ZK,
            Fault.PARTITION_JNS,
            Fault.PARTITION_ACTIVE,
        ):
            active = self._await_active()
            if active is None:
                return f"no active NameNode within {ACTIVE_WAIT:g}s", None
            if fault is Fault.KILL:
                c.kill(active, signal.SIGKILL)
                return active, lambda: c.restart(active)
            if fault is Fault.PAUSE:
                c.kill(active, signal.SIGSTOP)
                return active, lambda: c.kill(active, signal.SIGCONT)
            others = {
                Fault.PARTITION_ZK: ["zk"],
                Fault.PARTITION_JNS: list(c.journalnode_ids),
                Fault.PARTITION_ACTIVE: [
                    "zk",
                    *c.journalnode_ids,
                    *(n for n in c.namenode_ids if n != active),
                ],
            }[fault]
            c.partition([[active], others])
            return f"{active} | {','.join(others)}", c.heal_network
        if fault is Fault.KILL_STANDBY:
            active = c.active()
            standbys = [n for n in c.namenode_ids if n != active and c.running(n)]
            if not standbys:
                return "no standby NameNode", None
            target = standbys[step.choice % len(standbys)]
            c.kill(target, signal.SIGKILL)
            return target, lambda: c.restart(target)
        if fault is Fault.KILL_JN:
            jn = c.journalnode_ids[step.choice % len(c.journalnode_ids)]
            c.kill(jn, signal.SIGKILL)
            return jn, lambda: c.restart(jn)
        if fault is Fault.PARTITION_JN:
            jn = c.journalnode_ids[step.choice % len(c.journalnode_ids)]
            everyone = ["zk", *c.journalnode_ids, *c.namenode_ids]
            c.partition([[jn], [h for h in everyone if h != jn]])
            return jn, c.heal_network
        if fault is Fault.PARTITION_HALVES:
            hosts = ["zk", *c.journalnode_ids, *c.namenode_ids]
            first = [h for i, h in enumerate(hosts) if step.choice >> i & 1]
            second = [h for h in hosts if h not in first]
            if not first or not second:
                first, second = hosts[: len(hosts) // 2], hosts[len(hosts) // 2 :]
            c.partition([first, second])
            return f"{','.join(first)} | {','.join(second)}", c.heal_network
        if fault is Fault.POWER_CUT:
            return self._power_cut(step)
        if fault is Fault.DISK_FULL:
            full = c.disk_jn
            if full is None:
                return "no JournalNode on a small disk", None
            c.fill_disk(full)
            return full, lambda: c.free_disk(full)
        raise AssertionError(fault)

    def _power_cut(self, step: Step) -> tuple[str, Callable[[], None] | None]:
        """Cut the power of one JournalNode, of the active NameNode or of the rack (by
        ``step.choice``, among the daemons on crash filesystems); a torn write when bit 8
        of the choice is set. Healed by the power-on."""
        c = self.cluster
        if not isinstance(c, PowerControl) or not c.crash_mounted:
            return "no daemon on a crash filesystem", None
        power = c
        jns = [n for n in c.journalnode_ids if n in power.crash_mounted]
        target = step.choice % 3
        names: list[str]
        if target == 0 and jns:
            names = [jns[step.choice // 3 % len(jns)]]
        elif target == 1:
            active = self._await_active()
            if active is None or active not in power.crash_mounted:
                return f"no active NameNode on a crash filesystem within {ACTIVE_WAIT:g}s", None
            names = [active]
        else:
            names = [n for n in (*c.journalnode_ids, *c.namenode_ids) if n in power.crash_mounted]
        described = power.power_cut(names, torn=bool(step.choice & 0x100), seed=step.choice)
        return described, lambda: power.power_on(names)

    def stop(self, timeout: float = 120.0) -> None:
        """Stop the schedule, heal the fault in progress, restart what is down."""
        self._stop.set()
        self._thread.join(timeout)
        heal = self._heal
        if heal is not None and not self._thread.is_alive():
            try:
                heal()
            except Exception as exc:  # stop goes on to heal the network and restart daemons
                self.errors.append(f"heal at stop failed: {type(exc).__name__}: {exc}")
                log.error("nemesis heal at stop failed", error=str(exc))
        c = self.cluster
        c.heal_network()
        for name in c.namenode_ids + c.journalnode_ids:
            with contextlib.suppress(ProcessLookupError):
                if c.running(name):
                    c.kill(name, signal.SIGCONT)
        if c.disk_jn is not None:
            c.free_disk(c.disk_jn)
        for name in c.journalnode_ids + c.namenode_ids:
            if not c.running(name):
                self.record(
                    {"type": "nemesis", "fault": "restart-dead", "phase": "heal", "target": name}
                )
                c.restart(name)


def fill(path: Path, chunk: int = 1 << 20) -> int:
    """Write zeros to ``path`` until the file system is full; the bytes written."""
    written = 0
    zeros = bytes(chunk)
    with open(path, "wb", buffering=0) as out:
        while True:
            try:
                written += out.write(zeros)
            except OSError:
                if chunk == 1:
                    break
                chunk //= 2
                zeros = bytes(chunk)
        with contextlib.suppress(OSError):
            out.flush()
    return written

"""The deterministic simulation of the NameNode layer (docs/architecture.md §8.2, issue 13).

Two real NameNodes (``FSNamesystem``: namespace, ``FSEditLog`` group commit, retry cache, HA
transitions, ``EditLogTailer``) over the QJM simulator's JournalNodes (``qjm.sim.cluster``:
real ``Journal``s, in-memory storage, seeded RPC faults), elected through a seeded ZooKeeper
model (``nnsim.zookeeper``), with clients that retry through failovers. Each process runs on
its own ``SimEventLoop`` (``nnsim.loop``); one ``random.Random(seed)`` picks which loop runs
next, the clients' operations and delays, and every fault:

- a NameNode pauses (a GC pause, SIGSTOP) for up to twice the session timeout, so its session
  may expire and the other take over while it sleeps, then it resumes mid-flight;
- a NameNode crashes (its loop is dropped: no ``finally`` runs) and restarts later from its
  image and the journal; its ZooKeeper session expires after the timeout;
- a ZooKeeper session expires outright; the active is asked to roll its segment, at times by
  two or three followers at once (a standby and observers ask on their own clocks);
- JournalNodes crash and restart, and RPCs fail, as in the QJM simulator (``FaultInjector``).

Invariants, checked at the end over the whole run:

- ``nn-linearizable``: each key's history (stat, ls, mkdir, create, delete, with
  indeterminate calls) is linearizable (``hachaos.checker``), with the final namespace read
  once more into it, so an acknowledged answer that the final namespace contradicts fails;
- ``nn-acked-durable``: every acknowledged ``mkdir`` of a directory nobody deletes is in the
  final namespace;
- ``nn-standby-prefix``: every namespace a standby showed while tailing equals the final
  log replayed up to that standby's last applied txid;
- ``nn-recoverable``: once every fault is healed, a NameNode recovers the log (the audit);
- ``no-unexpected-error``: nothing but the protocol's own errors reached a client or a loop
  (``SegmentOverrunError``, edits logged past a segment's end marker, is a bug, not one).

The final namespace is what a third NameNode, started from the empty image after the faults
stop, recovers from the JournalNodes and replays (the real transition to active).

    result = run_nn_simulation(seed=7, steps=120)
    print(result.summary(), result.replay_command)
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import heapq
import itertools
import random
import re
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from conf import Settings
from conf.clock import use_clock
from conf.keys import KEYS
from conf.mutants import planted
from hachaos.checker import check_history, format_ops, parse_history
from hachaos.history import outcome
from hanamenode import fsimage
from hanamenode.errors import (
    EditLogError,
    NamenodeError,
    SegmentOverrunError,
    ServiceFailedError,
    StandbyError,
)
from hanamenode.ha import HAState
from hanamenode.namespace import Namespace
from hanamenode.namesystem import FSNamesystem
from hanamenode.peers import NameNodePeers
from hanamenode.storage import NameDirectory
from hanamenode.tailer import load_edits
from nnsim.channel import SimAioJournalChannel
from nnsim.loop import SimEventLoop, SimNameNodeLoop, VirtualClock
from nnsim.zookeeper import Session, ZooKeeper
from proto import edits_pb2
from proto.values import NamespaceInfo
from qjm.async_logger import AsyncLogger, AsyncLoggerSet
from qjm.journal_manager import QuorumJournalManager
from qjm.sim.cluster import Client, SimNetwork
from qjm.sim.faults import FaultInjector, FaultPlan
from qjm.sim.mutants import run_planted
from qjm.sim.runner import (
    JOURNAL_ID,
    NAMESPACE,
    SimResult,
    make_qjm_loggers,
    map_seeds,
    quiet_protocol_logs,
    replay_command,
)
from qjm.sim.trace import Trace, short

NN_LINEARIZABLE = "nn-linearizable"
NN_ACKED_DURABLE = "nn-acked-durable"
NN_STANDBY_PREFIX = "nn-standby-prefix"
NN_RECOVERABLE = "nn-recoverable"
NO_UNEXPECTED_ERROR = "no-unexpected-error"
NN_INVARIANTS = (
    NN_LINEARIZABLE,
    NN_ACKED_DURABLE,
    NN_STANDBY_PREFIX,
    NN_RECOVERABLE,
    NO_UNEXPECTED_ERROR,
)

QJM_TIMEOUT_KEY = re.compile(r"dfs\.qjournal\.(?!format)[a-z-]+\.timeout\.ms")
KEYS_DIR = "/keys"
ACKS_DIR = "/acks"
SESSION_TIMEOUT = 2.0
ELECTOR_TICK = 0.2
RPC_TIMEOUT = 1.5
"""A client's deadline for one NameNode call. A request that reaches a NameNode (one that
was paused, say) after its deadline is not run, as a gRPC server drops it."""
PINNED_READERS = 4
"""Readers bound to one NameNode each, with no failover: a failover proxy sticks to whoever
answered last, so without them nobody would ask a deposed active what it still answers
(hachaos's --pinned-readers)."""
PINNED_READ_TIMEOUT = 1.0
"""A pinned reader's deadline: short, so it keeps asking a paused NameNode, and its last
question waits there until the NameNode resumes."""
MAX_ATTEMPTS = 8
FAULT_RATE = 0.7
"""Scheduled faults per virtual second (the RPC faults come on top)."""
# RPC faults of the QJM simulator, lighter (a NameNode that loses its quorum steps down, and
# a run should see many failovers, not a cluster that is always recovering); NameNode
# crashes are the scheduler's, not the channel's.
NN_FAULT_PLAN = FaultPlan(
    fail_before=0.01,
    fail_after=0.01,
    jn_crash=0.002,
    torn_append=0.005,
    lost_accept=0.01,
    jn_crash_after_accept=0.01,
    writer_crash_first_batch=0.0,
    writer_crash_batch=0.0,
    writer_crash_recovery=0.0,
    writer_crash_accept=0.0,
    writer_crash_other=0.0,
    writer_crash_recovery_finalize=0.0,
    power_loss=0.3,
)


class NNInvariantViolation(Exception):
    def __init__(self, invariant: str, message: str) -> None:
        super().__init__(f"{invariant}: {message}")
        self.invariant = invariant
        self.message = message


def nn_settings() -> Settings:
    """The NameNodes' settings: tail the in-progress segment by polling rounds (the simulated
    JournalNodes serve no SubscribeEdits stream; the pushed path is held to the same tailing
    invariants by the QJM simulator's pushed reader, qjm.sim), the active rolls only when the
    scheduler asks, no checkpoints, the QJM's heartbeat every half second."""
    return Settings.from_mapping(
        {
            "dfs.nameservices": "simns",
            "dfs.ha.namenodes.simns": "nn1,nn2",
            "dfs.ha.tail-edits.period": "0.3",
            "dfs.ha.tail-edits.in-progress": "true",
            "dfs.ha.tail-edits.push": "false",
            "dfs.ha.log-roll.period": "100000",
            "dfs.namenode.checkpoint.txns": "1000000000",
            # The active's own rolls are off (no task): the fault schedule asks for rolls.
            "dfs.namenode.edit.log.autoroll.multiplier.threshold": "0",
            "dfs.namenode.checkpoint.period": "1000000",
            "dfs.qjournal.heartbeat.interval.ms": "500",
            # Every QJM quorum timeout 3 s (a hung JournalNode costs little virtual time).
            **{k.name: "3000" for k in KEYS if QJM_TIMEOUT_KEY.fullmatch(k.name)},
        }
    )


def initial_namespace() -> Namespace:
    """The formatted namespace (image at txid 0): the keys' and the acks' directories."""
    ns = Namespace(root_mtime_ms=0)
    ns.mkdir(KEYS_DIR, mtime_ms=0)
    ns.mkdir(ACKS_DIR, mtime_ms=0)
    ns.last_applied_txid = 0  # part of the formatted image, not of the log
    return ns


def format_name_dir(path: Path, ns_info: NamespaceInfo) -> NameDirectory:
    name_dir = NameDirectory(path)
    path.mkdir(parents=True, exist_ok=True)
    name_dir.write_version(ns_info)
    fsimage.save_image(initial_namespace(), path, 0, ns_info)
    return name_dir


@contextlib.contextmanager
def deterministic_collection() -> Iterator[None]:
    """No cyclic garbage collection during the run, one after it.

    A crashed NameNode's loop is dropped with its tasks suspended; when the collector frees
    them, Python closes their coroutines, which runs their ``finally`` blocks. At a moment the
    collector picks, that code would run in the middle of this run or the next one, and a
    seed would no longer say what happens. So the collector waits for the end of the run,
    and the warnings of coroutines closed that way (never awaited, ignored GeneratorExit) are
    silenced: they are the dropped processes, not bugs."""
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        hook = sys.unraisablehook
        sys.unraisablehook = lambda unraisable: None
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                gc.collect()
        finally:
            sys.unraisablehook = hook
            if was_enabled:
                gc.enable()


@dataclass(eq=False)
class SimNameNode:
    """One NameNode host: its name directory survives crashes; the rest is per incarnation."""

    nn_id: str
    name_dir: NameDirectory
    incarnation: int = 0
    loop: SimEventLoop | None = None
    fsn: FSNamesystem | None = None
    paused_until: float = 0.0
    restart_at: float | None = None
    session: Session | None = None
    clients: list[Client] = field(default_factory=list)
    stepping_down: bool = False
    """Its elector is taking it out of ACTIVE (the END-op sync and finalize in flight)."""

    @property
    def up(self) -> bool:
        return self.loop is not None

    def runnable(self, now: float) -> bool:
        return self.loop is not None and now >= self.paused_until


@dataclass(frozen=True)
class Snapshot:
    nn: str
    txid: int
    digest: str
    at: float


class Unreachable(Exception):
    """The NameNode the client called is down (connection refused)."""


class NNSimulation:
    """One seeded run of the NameNode pair; ``run()`` returns a ``SimResult``."""

    def __init__(
        self,
        seed: int,
        steps: int,
        *,
        n_journalnodes: int = 3,
        n_clients: int = 4,
        mutants: tuple[str, ...] = (),
        echo: Callable[[str], None] | None = None,
    ) -> None:
        self.seed = seed
        self.steps = steps
        self.n_journalnodes = n_journalnodes
        self.n_clients = n_clients
        self.mutants = tuple(sorted(mutants))
        self.rng = random.Random(seed)
        # Buggify (FoundationDB's word): a per-run choice that makes a rare timing common.
        # Its own generator, so runs that do not take it keep the main sequence's draws.
        self._buggify = random.Random(f"buggify-{seed}")
        self.slow_step_downs = self._buggify.random() < 0.8
        """The JournalNode RPCs of a NameNode stepping down take 50-500 ms each way: the
        window where a stepping-down active could still answer lasts long enough for the
        clients and the next active to meet it (issue 11's second finding)."""
        self.clock = VirtualClock()
        self.trace = Trace(echo=echo)
        self.faults = FaultInjector(self.rng, NN_FAULT_PLAN)
        with use_clock(self.clock):  # the JournalNodes load (and read the clock) here
            self.net = SimNetwork(n_journalnodes, JOURNAL_ID, NAMESPACE, self.faults, self.trace)
        self.net.on_unexpected = lambda what: self._unexpected(what)
        self.zk = ZooKeeper(self.clock, SESSION_TIMEOUT)
        self.settings = nn_settings()
        self.nodes: list[SimNameNode] = []
        self.client_loop = SimEventLoop(self.clock, "clients")
        self.wire = SimEventLoop(self.clock, "network")
        """Messages in flight (JournalNode RPCs, client requests): never paused."""
        self.records: list[dict[str, Any]] = []
        self._seq = itertools.count(1)
        self.acked_dirs: list[str] = []
        self.snapshots: list[Snapshot] = []
        self.violation: NNInvariantViolation | None = None
        self.failovers = 0
        self.acks = 0
        self._events: list[tuple[float, int, str, Callable[[], None]]] = []
        self._event_seq = itertools.count()
        self._clients_left = 0
        self._dropping = False
        self._readers: dict[int, tuple[QuorumJournalManager, QuorumJournalManager]] = {}
        self.cuts: dict[tuple[str, str], float] = {}
        """(NameNode, JournalNode) -> until when the network between them drops packets."""

    # ------------------------------------------------------------------ helpers

    def _unexpected(self, what: str) -> None:
        if self._dropping:
            return  # a dead process's coroutines being closed (SimEventLoop.abandon)
        self.trace(f"UNEXPECTED {what}")
        if self.violation is None:
            self.violation = NNInvariantViolation(NO_UNEXPECTED_ERROR, what)

    def _say(self, text: str) -> None:
        self.trace(f"[{self.clock.now:8.3f}] {text}")

    def _at(self, when: float, what: str, action: Callable[[], None]) -> None:
        heapq.heappush(self._events, (when, next(self._event_seq), what, action))

    def _record(self, record: dict[str, Any]) -> None:
        # The history's time: the order of events in the one thread (ties cannot happen).
        self.records.append({**record, "time": float(next(self._seq))})

    def _latency(self, node: SimNameNode) -> float:
        """One way of one JournalNode RPC of ``node``: mostly a few milliseconds, now and then
        a stall; slow throughout a step-down in the runs that buggify it."""
        if node.stepping_down and self.slow_step_downs:
            return self._buggify.uniform(0.05, 0.5)
        rng = self.rng
        return rng.uniform(0.05, 0.6) if rng.random() < 0.03 else rng.uniform(0.0005, 0.008)

    def _qjm_factory(
        self, node: SimNameNode, nn_loop: SimNameNodeLoop
    ) -> Callable[[NamespaceInfo], QuorumJournalManager]:
        """The NameNode's QJMs: the writer of an active period runs the real asynchronous
        loggers over ``SimAioJournalChannel`` (RPCs take virtual time); a reader made for
        the blocking bridge (the tailer's) answers at once, as the QJM simulator's do."""

        def make(ns_info: NamespaceInfo) -> QuorumJournalManager:
            client = Client(f"{node.nn_id}.{node.incarnation}.{len(node.clients)}")
            node.clients.append(client)
            timeouts = self.settings.qjm
            direct = QuorumJournalManager(
                make_qjm_loggers(self.net, client), JOURNAL_ID, ns_info, timeouts
            )
            if nn_loop.in_blocking:
                return direct
            loggers = AsyncLoggerSet(
                AsyncLogger(
                    # Duck-typed as grpc.aio's AioJournalChannel (is_aio, coroutines).
                    cast(Any, SimAioJournalChannel)(
                        channel,
                        self.wire,
                        functools.partial(self._latency, node),
                        self._cut_check(node, channel),
                    ),
                    JOURNAL_ID,
                    ns_info,
                    timeouts=timeouts,
                )
                for channel in self.net.channels(client)
            )
            writer = QuorumJournalManager(loggers, JOURNAL_ID, ns_info, timeouts)
            self._readers[id(writer)] = (writer, direct)
            return writer

        return make

    def _cut_check(self, node: SimNameNode, channel: Any) -> Callable[[], bool]:
        key = (node.nn_id, channel.address)
        return lambda: self.cuts.get(key, 0.0) > self.clock.now

    def _for_blocking(self, arg: Any) -> Any:
        """A writer's QJM handed to the blocking bridge reads through its direct twin."""
        pair = self._readers.get(id(arg)) if isinstance(arg, QuorumJournalManager) else None
        return pair[1] if pair is not None and pair[0] is arg else arg

    # ------------------------------------------------------------------ NameNode processes

    def _start_namenode(self, node: SimNameNode, *, elector: bool = True) -> None:
        node.incarnation += 1
        node.clients = []
        node.stepping_down = False  # a crash mid-step-down runs no ``finally``
        loop = SimEventLoop(self.clock, f"{node.nn_id}#{node.incarnation}")
        nn_loop = SimNameNodeLoop(node.nn_id, loop, self._for_blocking)
        fsn = FSNamesystem(
            self.settings,
            node.nn_id,
            node.name_dir,
            peers=NameNodePeers([]),
            qjm_factory=self._qjm_factory(node, nn_loop),
            nn_loop=nn_loop,
        )
        node.loop, node.fsn, node.paused_until, node.restart_at = loop, fsn, 0.0, None
        self._say(f"{node.nn_id} starts (incarnation {node.incarnation})")
        loop.create_task(self._guard(node, fsn.start_async(), "start"), name="start")
        if elector:
            loop.create_task(self._elector(node, fsn), name=f"elector-{node.nn_id}")

    async def _guard(self, node: SimNameNode, coro: Coroutine[Any, Any, Any], what: str) -> None:
        try:
            await coro
        except SegmentOverrunError as exc:
            self._unexpected(f"{node.nn_id} {what} raised {short(exc, 400)}")
        except NamenodeError as exc:
            self._say(f"{node.nn_id} {what} failed: {short(exc)}")
        except Exception as exc:
            self._unexpected(f"{node.nn_id} {what} raised {short(exc, 400)}")

    async def _elector(self, node: SimNameNode, fsn: FSNamesystem) -> None:
        """The elector's round (docs/architecture.md §6.2), over the ZooKeeper model: keep the
        session; when it expires, leave ACTIVE and reconnect; take the free lock when
        standby and become active (fencing is the new epoch); give the lock back when this
        NameNode is no longer active (its edit log failed, its transition failed)."""
        nn = node.nn_id
        session = node.session = self.zk.connect(nn)
        while True:
            await asyncio.sleep(ELECTOR_TICK)
            # The ping is a round trip to the ensemble: what queued meanwhile runs first.
            await asyncio.sleep(self.rng.uniform(0.002, 0.02))
            if not self.zk.ping(session):
                self._say(f"{nn} learns its ZooKeeper session expired")
                if fsn.state is HAState.ACTIVE:
                    node.stepping_down = True
                    try:
                        await self._guard(node, fsn.transition_to_standby_async(), "step-down")
                    finally:
                        node.stepping_down = False
                session = node.session = self.zk.connect(nn)
                continue
            if self.zk.holds(session):
                if fsn.state is not HAState.ACTIVE:
                    self._say(f"{nn} gives the lock back (it is {fsn.state.value})")
                    self.zk.release(session)
            elif fsn.state is HAState.STANDBY and self.zk.try_lock(session):
                self._say(f"{nn} won the election")
                self.failovers += 1
                try:
                    await fsn.transition_to_active_async()
                    self._say(f"{nn} is active (epoch {fsn.service_status().epoch})")
                except ServiceFailedError as exc:
                    self._say(f"{nn} could not become active: {short(exc)}")
                    self.zk.release(session)
                except Exception as exc:
                    self._unexpected(f"{nn} transition raised {short(exc, 400)}")

    def _crash(self, node: SimNameNode, down: float) -> None:
        assert node.loop is not None
        self._say(f"{node.nn_id} CRASHES; restarts in {down:.2f}s")
        self._abandon(node.loop)
        node.loop, node.fsn = None, None
        for client in node.clients:
            client.crashed = True
        node.restart_at = self.clock.now + down
        self._at(node.restart_at, f"restart {node.nn_id}", lambda: self._start_namenode(node))

    # ------------------------------------------------------------------ clients

    async def _rpc(
        self,
        target: SimNameNode,
        call: Callable[[FSNamesystem], Coroutine[Any, Any, Any]],
        deadline: float = RPC_TIMEOUT,
    ) -> asyncio.Task[Any]:
        """Send ``call`` to ``target`` over the simulated network; the NameNode's task once it
        answers. Unreachable (down), or TimeoutError (no answer within the RPC timeout)."""
        if target.loop is None or target.fsn is None:
            await asyncio.sleep(0.01)
            raise Unreachable(target.nn_id)
        loop, fsn, incarnation = target.loop, target.fsn, target.incarnation
        answered: asyncio.Future[asyncio.Task[Any]] = self.client_loop.create_future()
        rng = self.rng

        def settle(task: asyncio.Task[Any]) -> None:
            if not answered.done():
                answered.set_result(task)

        expires = self.clock.now + deadline

        def start() -> None:
            if target.incarnation != incarnation or target.loop is not loop:
                return
            if self.clock.now >= expires:
                return  # as a gRPC server does: the caller's deadline passed, not run
            task = loop.create_task(call(fsn))

            def answer(t: asyncio.Task[Any]) -> None:
                if not t.cancelled():
                    t.exception()  # retrieved here: the client may have stopped waiting
                self.client_loop.call_later(rng.uniform(0.001, 0.03), settle, t)

            task.add_done_callback(answer)

        # On the wire, then in the NameNode's socket: handled when it next runs, before
        # its timers (a paused NameNode finds the requests that queued meanwhile).
        self.wire.call_later(rng.uniform(0.001, 0.03), loop.call_soon, start)
        async with asyncio.timeout(deadline):
            return await answered

    async def _call(
        self, process: int, f: str, path: str, args: dict[str, Any], call_id: int
    ) -> tuple[str, Any, str | None]:
        """One logical call with the failover proxy's policy: the NameNode that answered last
        first, the other on StandbyError, a failed edit log, a timeout or a refused
        connection, with backoff; the same (client id, call id) on every attempt."""
        client_id = b"client-%d" % process

        def invoke(fsn: FSNamesystem) -> Coroutine[Any, Any, Any]:
            if f == "mkdir":
                return fsn.mkdirs_async(
                    path,
                    create_parent=bool(args.get("parents")),
                    client_id=client_id,
                    call_id=call_id,
                )
            if f == "create":
                return fsn.create_async(path, client_id=client_id, call_id=call_id)
            if f == "delete":
                return fsn.delete_async(path, client_id=client_id, call_id=call_id)
            return self._read_call(fsn, f, path)

        index = self._preferred.get(process, 0)
        last = "no attempt"
        for attempt in range(MAX_ATTEMPTS):
            target = self.nodes[index]
            try:
                task = await self._rpc(target, invoke)
            except (TimeoutError, Unreachable) as lost:
                last = f"{target.nn_id}: {type(lost).__name__}"
            else:
                exc = task.exception() if not task.cancelled() else asyncio.CancelledError()
                if exc is None:
                    self._preferred[process] = index
                    result = task.result()
                    return outcome(f, getattr(result, "result", result))
                if isinstance(exc, StandbyError | EditLogError | ServiceFailedError):
                    last = f"{target.nn_id}: {short(exc)}"
                elif isinstance(exc, NamenodeError):
                    self._preferred[process] = index
                    return outcome(f, None, exc)
                else:
                    self._unexpected(f"{target.nn_id} answered {f} {path} with {short(exc, 400)}")
                    return "info", None, short(exc)
            index = (index + 1) % len(self.nodes)
            await asyncio.sleep(min(0.05 * 2**attempt, 0.8) * (0.5 + self.rng.random()))
        return "info", None, f"gave up after {MAX_ATTEMPTS} attempts ({last})"

    async def _client(self, process: int, ops: int) -> None:
        rng = self.rng
        keys = [f"k{i}" for i in range(3)]
        try:
            for n in range(1, ops + 1):
                await asyncio.sleep(rng.uniform(0.0, 0.25))
                if rng.random() < 0.15:
                    await self._ack_dir(process, n)
                    continue
                f = rng.choice(
                    ("mkdir", "mkdir", "create", "delete", "delete", "stat", "stat", "ls")
                )
                key = rng.choice(keys)
                args = {"parents": True} if f == "mkdir" and rng.random() < 0.3 else {}
                path = KEYS_DIR if f == "ls" else f"{KEYS_DIR}/{key}"
                self._record(
                    {
                        "type": "invoke",
                        "process": process,
                        "key": "" if f == "ls" else key,
                        "f": f,
                        "args": args,
                    }
                )
                kind, value, error = await self._call(process, f, path, args, n)
                self._say(f"client {process} {f} {path} -> {kind} {value}")
                record: dict[str, Any] = {
                    "type": kind,
                    "process": process,
                    "key": "" if f == "ls" else key,
                    "f": f,
                }
                if kind == "ok":
                    record["value"] = value
                if error:
                    record["error"] = error
                self._record(record)
        finally:
            self._clients_left -= 1

    async def _pinned_reader(self, process: int, target: SimNameNode) -> None:
        """Reads from one NameNode only, until the clients are done."""
        rng = self.rng
        while self._clients_left > 0:
            await asyncio.sleep(rng.uniform(0.05, 0.3))
            f = rng.choice(("stat", "stat", "ls"))
            key = rng.choice(("k0", "k1", "k2"))
            path = KEYS_DIR if f == "ls" else f"{KEYS_DIR}/{key}"
            shown = "" if f == "ls" else key
            self._record({"type": "invoke", "process": process, "key": shown, "f": f, "args": {}})
            kind, value, error = "info", None, "no answer"
            answer: tuple[str, Any, str | None]
            try:
                task = await self._rpc(
                    target, functools.partial(self._read_call, f=f, path=path), PINNED_READ_TIMEOUT
                )
            except (TimeoutError, Unreachable) as lost:
                error = type(lost).__name__
            else:
                exc = task.exception() if not task.cancelled() else asyncio.CancelledError()
                if exc is None:
                    answer = outcome(f, task.result())
                    kind, value, error = answer[0], answer[1], answer[2] or ""
                elif isinstance(exc, NamenodeError):
                    answer = outcome(f, None, exc)
                    kind, value, error = answer[0], answer[1], answer[2] or ""
                else:
                    self._unexpected(f"{target.nn_id} answered {f} {path} with {short(exc, 400)}")
            self._say(
                f"pinned reader {process}@{target.nn_id} {f} {path} -> {kind} {value}"
                + (f" ({error})" if kind != "ok" and error else "")
            )
            record: dict[str, Any] = {"type": kind, "process": process, "key": shown, "f": f}
            if kind == "ok":
                record["value"] = value
            if error:
                record["error"] = error
            self._record(record)

    @staticmethod
    def _read_call(fsn: FSNamesystem, f: str, path: str) -> Coroutine[Any, Any, Any]:
        return fsn.get_file_info_async(path) if f == "stat" else fsn.get_listing_async(path)

    async def _ack_dir(self, process: int, n: int) -> None:
        path = f"{ACKS_DIR}/c{process}-{n}"
        kind, value, _ = await self._call(process, "mkdir", path, {}, n)
        self._say(f"client {process} mkdir {path} -> {kind} {value}")
        if kind == "ok" and value == "created":
            self.acked_dirs.append(path)
            self.acks += 1

    # ------------------------------------------------------------------ faults

    def _schedule_next_fault(self) -> None:
        self._at(self.clock.now + self.rng.expovariate(FAULT_RATE), "fault", self._fault)

    def _fault(self) -> None:
        if self._clients_left <= 0:
            return
        rng = self.rng
        roll = rng.random()
        up = [n for n in self.nodes if n.up]
        active = [n for n in up if n.fsn is not None and n.fsn.state is HAState.ACTIVE]
        if roll < 0.35 and up:
            # Mostly the active: a paused active whose session expires is the interesting case.
            node = active[0] if active and rng.random() < 0.7 else rng.choice(up)
            span = rng.uniform(0.5, 2.5) * SESSION_TIMEOUT
            node.paused_until = max(node.paused_until, self.clock.now + span)
            self._say(f"{node.nn_id} PAUSED for {span:.2f}s")
        elif roll < 0.42 and up:
            self._crash(rng.choice(up), rng.uniform(0.5, 4.0))
        elif roll < 0.5:
            live = [n for n in self.nodes if n.session is not None and n.session.alive]
            if live:
                node = rng.choice(live)
                assert node.session is not None
                self._say(f"{node.nn_id}'s ZooKeeper session EXPIRES")
                self.zk.expire(node.session)
        elif roll < 0.62:
            jn = rng.choice(self.net.nodes)
            if all(other.up for other in self.net.nodes):
                self.net.crash_node(jn, "scheduled")
        elif roll < 0.8:
            node = active[0] if active and rng.random() < 0.7 else rng.choice(self.nodes)
            span = rng.uniform(1.0, 6.0)
            cut = rng.sample(self.net.nodes, rng.choice((1, 1, 2)))
            for jn in cut:
                self.cuts[(node.nn_id, jn.address)] = self.clock.now + span
            names = ",".join(jn.address for jn in cut)
            self._say(f"{node.nn_id} CUT OFF from {names} for {span:.2f}s")
        elif active:
            node = active[0]
            fsn, loop = node.fsn, node.loop
            assert fsn is not None and loop is not None
            # The standby and any observers ask on their own clocks: now and then together.
            asks = rng.choice((1, 1, 2, 3))
            self._say(f"{node.nn_id} is asked to roll its edit log ({asks} at once)")
            for _ in range(asks):
                loop.create_task(self._guard(node, fsn.roll_edit_log_async(), "roll"))
        self._schedule_next_fault()

    def _restart_jn(self, jn: Any) -> None:
        if not jn.up:
            jn.restart()
            self.trace(f"  {jn.address} restarted")

    def _restart_jns(self) -> None:
        """JournalNodes that died (scheduled, or in an RPC) come back after a while."""
        for jn in self.net.nodes:
            if not jn.up and self.rng.random() < 0.3:
                self._restart_jn(jn)
        if self._clients_left > 0:
            self._at(self.clock.now + 0.5, "restart journalnodes", self._restart_jns)

    def _snapshot(self) -> None:
        """What each tailing standby shows now (checked against the final log at the end)."""
        for node in self.nodes:
            fsn = node.fsn
            if fsn is None or not node.runnable(self.clock.now) or fsn.state is not HAState.STANDBY:
                continue
            # Mid-transition, the namespace may hold the new segment's first edit, which
            # is not durable yet (the transition reloads the image if it fails).
            if fsn._transition_lock.locked():
                continue
            ns = fsn.namespace
            self.snapshots.append(
                Snapshot(node.nn_id, ns.last_applied_txid, ns.digest(), self.clock.now)
            )
        if self._clients_left > 0:
            self._at(self.clock.now + 0.5, "snapshot", self._snapshot)

    # ------------------------------------------------------------------ the scheduler

    def _loops(self) -> list[SimEventLoop]:
        loops = [self.client_loop, self.wire]
        loops += [n.loop for n in self.nodes if n.loop is not None and n.runnable(self.clock.now)]
        return loops

    def _drive(self, until: Callable[[], bool], limit: float) -> None:
        """Run loops, in an order the RNG picks, and the scheduled events, until ``until()``
        or the virtual time ``limit``."""
        while not until() and self.violation is None:
            loops = self._loops()
            ready = [lp for lp in loops if lp.has_ready()]
            if ready:
                self.rng.choice(ready).run_once()
                continue
            deadlines = [lp.next_deadline() for lp in loops]
            deadlines += [
                n.paused_until for n in self.nodes if n.up and n.paused_until > self.clock.now
            ]
            if self._events:
                deadlines.append(self._events[0][0])
            when = min(deadlines, default=float("inf"))
            if when > limit:
                self._say(f"virtual time limit {limit:.0f}s reached")
                return
            self.clock.advance_to(when)
            while self._events and self._events[0][0] <= self.clock.now:
                _, _, _, action = heapq.heappop(self._events)
                action()
            for lp in [
                self.client_loop,
                self.wire,
                *(n.loop for n in self.nodes if n.loop is not None),
            ]:
                for error in lp.errors:
                    self._unexpected(f"{lp.name}: {error}")
                lp.errors.clear()

    # ------------------------------------------------------------------ the run

    def run(self) -> SimResult:
        started = time.perf_counter()
        self.trace(
            f"seed={self.seed} steps={self.steps} journalnodes={self.n_journalnodes} "
            f"namenodes=2 clients={self.n_clients} mutants={','.join(self.mutants) or '-'}"
        )
        self._preferred: dict[int, int] = {}
        with tempfile.TemporaryDirectory(prefix="nnsim-") as tmp, use_clock(self.clock):
            try:
                self._run(Path(tmp))
            except NNInvariantViolation as v:
                self.violation = v
            finally:
                self._drop_processes()
        return self._result(time.perf_counter() - started)

    def _abandon(self, loop: SimEventLoop) -> None:
        self._dropping = True
        try:
            loop.abandon()
        finally:
            self._dropping = False

    def _drop_processes(self) -> None:
        for node in self.nodes:
            if node.loop is not None:
                self._abandon(node.loop)
            node.loop, node.fsn = None, None
        self._abandon(self.client_loop)
        self._abandon(self.wire)
        self._events.clear()

    def _run(self, tmp: Path) -> None:
        self.faults.enabled = False
        formatter = QuorumJournalManager(
            make_qjm_loggers(self.net, Client("format", is_writer=False)), JOURNAL_ID, NAMESPACE
        )
        formatter.format()
        self.faults.enabled = True
        for nn in ("nn1", "nn2"):
            node = SimNameNode(nn, format_name_dir(tmp / nn, NAMESPACE))
            self.nodes.append(node)
            self._start_namenode(node)
        ops = max(1, self.steps // self.n_clients)
        self._clients_left = self.n_clients
        for process in range(self.n_clients):
            self.client_loop.create_task(self._client(process, ops), name=f"client-{process}")
        for i in range(PINNED_READERS):
            process = 100 + i
            self.client_loop.create_task(
                self._pinned_reader(process, self.nodes[i % len(self.nodes)]),
                name=f"pinned-reader-{process}",
            )
        self._schedule_next_fault()
        self._at(0.5, "snapshot", self._snapshot)
        self._at(0.5, "restart journalnodes", self._restart_jns)
        self._drive(lambda: self._clients_left <= 0, limit=3600.0)
        if self.violation is not None:
            return
        self._say(f"clients done; {self.acks} ack dirs; healing and auditing")
        self._audit(tmp)

    def _audit(self, tmp: Path) -> None:
        """Stop the faults and the pair; a third NameNode recovers the log from the empty
        image (the real transition to active) and its namespace is the final one."""
        self.faults.enabled = False
        self.net.partitioned.clear()
        for jn in self.net.nodes:
            self._restart_jn(jn)
        for node in self.nodes:
            if node.loop is not None:
                self._abandon(node.loop)
                node.loop = None
                for client in node.clients:
                    client.crashed = True
        auditor = SimNameNode("audit", format_name_dir(tmp / "audit", NAMESPACE))
        self.nodes = [auditor]
        self._start_namenode(auditor, elector=False)
        fsn = auditor.fsn
        assert fsn is not None and auditor.loop is not None
        done: list[bool] = []
        failures: list[str] = []

        async def recover() -> None:
            while fsn.state is not HAState.STANDBY:
                await asyncio.sleep(0.1)
            try:
                await fsn.transition_to_active_async()
                await fsn.transition_to_standby_async()
            except NamenodeError as exc:
                failures.append(short(exc, 400))
                return
            done.append(True)

        auditor.loop.create_task(recover())
        self._clients_left = 0
        self._drive(lambda: bool(done or failures), limit=self.clock.now + 600.0)
        if self.violation is not None:
            return
        if not done:
            why = failures[0] if failures else "it did not finish"
            raise NNInvariantViolation(
                NN_RECOVERABLE, f"with every fault healed, a NameNode cannot recover the log: {why}"
            )
        final = fsn.namespace
        self._say(f"final namespace at txid {final.last_applied_txid}: {final.digest()[:12]}")
        self._check_acked(final)
        self._check_linearizable(final)
        self._check_prefixes(fsn)

    def _check_acked(self, final: Namespace) -> None:
        missing = [p for p in self.acked_dirs if not final.exists(p)]
        if missing:
            raise NNInvariantViolation(
                NN_ACKED_DURABLE,
                f"{len(missing)} acknowledged mkdir(s) missing from the final namespace: "
                + ", ".join(missing[:5]),
            )

    def _check_linearizable(self, final: Namespace) -> None:
        for i, key in enumerate(("k0", "k1", "k2")):
            process = 10_000 + i
            path = f"{KEYS_DIR}/{key}"
            state = "absent"
            if final.exists(path):
                state = "dir" if final.stat(path).is_dir else "file"
            self._record(
                {"type": "invoke", "process": process, "key": key, "f": "stat", "args": {}}
            )
            self._record(
                {"type": "ok", "process": process, "key": key, "f": "stat", "value": state}
            )
        history = parse_history(self.records)
        result = check_history(history)
        if not result.ok:
            lines = []
            for key, ops in result.anomalies.items():
                lines.append(f"key {key}:\n{format_ops(ops)}")
            unknown = result.unknown
            if unknown and not result.anomalies:
                return  # the search gave up (no verdict): not a violation
            raise NNInvariantViolation(NN_LINEARIZABLE, "\n".join(lines) or "not linearizable")

    def _check_prefixes(self, fsn: FSNamesystem) -> None:
        """Replay the final log from the empty image; every standby snapshot must match the
        replay at its txid."""
        if not self.snapshots:
            return
        wanted: dict[int, list[Snapshot]] = {}
        for snap in self.snapshots:
            wanted.setdefault(snap.txid, []).append(snap)
        replay = initial_namespace()
        seen: dict[int, str] = {}
        if 0 in wanted:
            seen[0] = replay.digest()

        def apply(op: edits_pb2.EditOp) -> bool:
            replay.apply(op)
            if op.txid in wanted:
                seen[op.txid] = replay.digest()
            return True

        reader = QuorumJournalManager(
            make_qjm_loggers(self.net, Client("auditor-reader", is_writer=False)),
            JOURNAL_ID,
            NAMESPACE,
        )
        load_edits(reader, 1, apply)
        for txid, snaps in sorted(wanted.items()):
            for snap in snaps:
                if txid not in seen:
                    raise NNInvariantViolation(
                        NN_STANDBY_PREFIX,
                        f"{snap.nn} showed txid {txid} at t={snap.at:.3f}, beyond the final "
                        f"log's end {replay.last_applied_txid}",
                    )
                if seen[txid] != snap.digest:
                    raise NNInvariantViolation(
                        NN_STANDBY_PREFIX,
                        f"{snap.nn} showed a namespace at txid {txid} (t={snap.at:.3f}) that "
                        "the final log does not hold at that txid",
                    )

    def _result(self, wall: float) -> SimResult:
        v = self.violation
        if v is not None:
            for line in v.message.splitlines()[:30]:
                self.trace(f"VIOLATION {line}")
        return SimResult(
            seed=self.seed,
            steps=self.steps,
            verdict="ok" if v is None else "violation",
            failovers=self.failovers,
            txns_acknowledged=sum(1 for r in self.records if r["type"] == "ok") + self.acks,
            faults_injected=self.faults.total + self.zk.expirations,
            violated_invariant=None if v is None else v.invariant,
            message=None if v is None else v.message,
            wall_seconds=wall,
            replay_command=nn_replay_command(
                self.seed, self.steps, self.n_journalnodes, self.mutants
            ),
            trace_digest=self.trace.digest,
            writers=sum(1 for line in self.trace.tail() if "won the election" in line),
            trace_tail=self.trace.tail(),
        )


def nn_replay_command(
    seed: int, steps: int, n_journalnodes: int = 3, mutants: tuple[str, ...] = ()
) -> str:
    """The one command line that replays a NameNode-layer run."""
    qjm_run = replay_command(seed, steps, n_journalnodes, mutants)
    return qjm_run.replace("python -m qjm.sim ", "python -m nnsim ", 1)


def run_nn_simulation(
    seed: int,
    steps: int = 120,
    *,
    n_journalnodes: int = 3,
    mutants: tuple[str, ...] = (),
    quiet: bool = True,
    echo: Callable[[str], None] | None = None,
) -> SimResult:
    """One deterministic run of the NameNode layer: ``steps`` client operations in all.
    Same arguments, same trace (``trace_digest``)."""
    # The collection comes after the run's objects are gone (deterministic_collection).
    with (
        quiet_protocol_logs() if quiet else contextlib.nullcontext(),
        planted(*mutants) as now,
        deterministic_collection(),
    ):
        return NNSimulation(
            seed,
            steps,
            n_journalnodes=n_journalnodes,
            mutants=tuple(m.switch for m in now),
            echo=echo,
        ).run()


def _run_seed(seed: int, steps: int, mutants: tuple[str, ...]) -> SimResult:
    return run_nn_simulation(seed, steps, mutants=mutants)


def run_nn_simulations(
    seeds: list[int] | range, steps: int = 120, *, mutants: tuple[str, ...] = (), jobs: int = 1
) -> list[SimResult]:
    """``run_nn_simulation`` of each seed, in seed order, in ``jobs`` spawned workers."""
    return map_seeds(_run_seed, seeds, steps, mutants, jobs)


def nn_seed_outcome(name: str, seed: int, steps: int) -> tuple[str, int, str | None]:
    """``qjm.sim.mutants.run_seed`` for the NameNode layer: (name, seed, invariant or None),
    the mutant planted with its masks (``qjm.sim.mutants.run_planted``)."""
    result, caught = run_planted(
        name, lambda planted: run_nn_simulation(seed, steps, mutants=planted)
    )
    return name, seed, result.violated_invariant if caught else None


__all__ = [
    "NN_INVARIANTS",
    "NNSimulation",
    "nn_replay_command",
    "nn_seed_outcome",
    "run_nn_simulation",
    "run_nn_simulations",
]

"""FSNamesystem: the namespace, the edit log, the retry cache and the HA state of one
NameNode, owned by the NameNode's event loop (docs/architecture.md §5.3, §4.7; HDFS
``FSNamesystem``).

Every method that reads or changes the namesystem is a coroutine on the loop
(``hanamenode.loop``); the loop is the namesystem lock: between two awaits nothing else runs.
Every mutation, on the active only, is one coroutine::

    check ACTIVE (else StandbyError), wait while a roll keeps writes out
    check the retry cache (a retry gets the first answer, once that answer's txid is durable)
    prepare (decide, or raise the user's error); log_and_apply (next txid, applied, buffered)
        -- no await from the check to here --
    await log_sync(txid) (the syncer ships it with whatever else accumulated), then answer

Reads are served by the active, by an observer once it has applied the txid the client has
seen (waiting up to ``dfs.namenode.observer.read.max-wait.ms``, else ``ObserverBehindError``;
docs/consistency.md §9), and by a standby only when the client accepts stale answers. Every
client answer records the txid of the state it reflects in ``ANSWER_TXID`` (the servicer sends
it to the client in a trailer).
Every answer of the active that logs nothing (a read, a no-op or refused mutation) is
linearizable (issue 11, docs/consistency.md §4.1): it waits until the edits it observed are
durable and for a read-index round (``qjm.read_index``) that confirms the writer's epoch on a
JournalNode quorum after the call arrived. Leaving ACTIVE stops every answer first, before
the step-down's I/O, and a fenced writer (a newer epoch learned from any JournalNode call)
fails its edit log at once, which refuses every answer and leaves ACTIVE.

Transitions are serialized and idempotent:

- STANDBY <-> OBSERVER: only the state changes; both tail and checkpoint alike. An observer
  is never made active (a clear ``ServiceFailedError``); it must be made standby first.

- STANDBY -> ACTIVE: stop the tailer and checkpointer; a new QJM writer takes a new epoch and
  recovers the unfinalized segment (fencing every older writer); the tailer's ``catch_up``
  applies the log up to the recovered end; a new segment starts right after it; writes open;
  QJM heartbeats start.
- ACTIVE -> STANDBY: writes stop; the segment is ended (EndLogSegmentOp), synced and
  finalized (best effort: without a quorum it stays in progress for the next writer's
  recovery); the writer is closed; tailing resumes. If any applied edit was not durable (the
  edit log failed), the namespace is reloaded from the newest image first, so this NameNode
  never keeps an edit that the log may not have.

A fatal edit-log failure (quorum lost, writer fenced) makes the active leave ACTIVE on its own,
from a short-lived ``ha-abort-<nn>`` task.

Threads (the elector, the health monitor, tests) call the same methods without the
``_async`` suffix: each is one ``NameNodeLoop.run`` of the coroutine.

    fsn = FSNamesystem(settings, "nn1", NameDirectory(path))   # makes its own loop
    fsn.start()                       # loads the newest image, STANDBY, tailing
    fsn.transition_to_active()
    fsn.mkdirs("/a", client_id=b"c", call_id=1)   # Mutation(result=True, txid=...)
    await fsn.mkdirs_async("/b")      # on the loop (the gRPC servicers)
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar, cast

import structlog

from conf import Settings, clock
from conf.mutants import Mutant, active
from hanamenode import fsimage, ha
from hanamenode.checkpointer import StandbyCheckpointer, checkpoint_info
from hanamenode.editlog import FSEditLog
from hanamenode.errors import (
    EditLogError,
    EditLogReplayError,
    HealthCheckFailedError,
    ImageNotFoundError,
    InvalidArgumentError,
    NamenodeError,
    ObserverBehindError,
    ServiceFailedError,
    StandbyError,
)
from hanamenode.ha import TAILING_STATES, HAState, ServiceStatus
from hanamenode.journal import JournalFactory, JournalManager, connect_journal
from hanamenode.loop import AppliedTxid, NameNodeLoop, SharedRounds
from hanamenode.metrics import NameNodeMetrics, StateSnapshot
from hanamenode.namespace import (
    DEFAULT_REPLICATION,
    DIR_PERMISSION,
    FILE_PERMISSION,
    Namespace,
    StatInfo,
    TentativeMulti,
)
from hanamenode.peers import NameNodePeers
from hanamenode.retry_cache import CacheEntry, RetryCache
from hanamenode.startup import Phase, PhaseStatus, StartupProgress, describe
from hanamenode.storage import NameDirectory
from hanamenode.tailer import EditLogTailer, LoadResult, edit_source_for
from hanamenode.transitions import Cause, TransitionHistory, edit_log_failure_cause
from proto import edits_pb2
from qjm.errors import QJMError, describe_exception
from qjm.journal_manager import QuorumJournalManager

log = structlog.get_logger(__name__)

T = TypeVar("T")

QJMFactory = JournalFactory
"""Makes the journal manager of the configured journal (the name predates the second
backend: ``hanamenode.journal.JournalFactory``)."""

LISTING_PAGE_BYTES = 1 << 20
"""About the most one listing page holds in paths, far below every gRPC message limit."""

ANSWER_TXID: contextvars.ContextVar[int] = contextvars.ContextVar("answer_txid", default=0)
"""The txid of the state the client call being answered reflects (0: none was decided, e.g.
a refusal by state). Set by the client calls below in the caller's context: a grpc.aio call
is one task, so the servicer reads what the namesystem set for its own call."""


Step = Callable[[Namespace], edits_pb2.EditOp | None]
"""One mutation's decision on a namespace (``Namespace.prepare_*``): an op, None for nothing
to log, or the user's error. A multi is a list of them (``Namespace.prepare_multi``)."""


def mkdir_step(path: str, *, create_parent: bool = False, permission: int = 0) -> Step:
    perm = permission or DIR_PERMISSION
    return lambda ns: ns.prepare_mkdir(path, parents=create_parent, permission=perm)


def create_step(
    path: str,
    *,
    overwrite: bool = False,
    permission: int = 0,
    length: int = 0,
    replication: int = 0,
) -> Step:
    perm = permission or FILE_PERMISSION
    repl = replication or DEFAULT_REPLICATION
    return lambda ns: ns.prepare_create(
        path, overwrite=overwrite, permission=perm, length=length, replication=repl
    )


def delete_step(path: str, *, recursive: bool = False) -> Step:
    return lambda ns: ns.prepare_delete(path, recursive=recursive)


def rename_step(src: str, dst: str) -> Step:
    return lambda ns: ns.prepare_rename(src, dst)


@dataclass(frozen=True, slots=True)
class Mutation(Generic[T]):
    """The answer to a mutation: its result and the txid that made it (0 when nothing was
    logged, e.g. ``mkdir -p`` of an existing directory)."""

    result: T
    txid: int


class FSNamesystem:
    """One NameNode's namesystem. ``start`` it, transition it, ``stop`` it.

    ``qjm_factory`` makes a journal manager for the configured journal
    (``hanamenode.journal.connect_journal``: the QJM or the ZooKeeper journal; tests may wrap
    it); the namesystem makes one reader for the tailer and one writer per active period.
    """

    def __init__(
        self,
        settings: Settings,
        nn_id: str,
        name_dir: NameDirectory,
        *,
        metrics: NameNodeMetrics | None = None,
        peers: NameNodePeers | None = None,
        qjm_factory: QJMFactory | None = None,
        retry_cache_capacity: int | None = None,
        nn_loop: NameNodeLoop | None = None,
    ) -> None:
        self.settings = settings
        self.nn_id = nn_id
        self.name_dir = name_dir
        self.ns_info = name_dir.read_version()
        self.metrics = metrics if metrics is not None else NameNodeMetrics()
        self.peers = peers if peers is not None else NameNodePeers.from_settings(settings, nn_id)
        self._qjm_factory: QJMFactory = qjm_factory or (
            lambda ns_info: connect_journal(
                settings, ns_info, nn_id=nn_id, name_dir=name_dir.path
            )
        )
        self._retry_cache_capacity = retry_cache_capacity
        self._owns_loop = nn_loop is None
        self.nn_loop = nn_loop if nn_loop is not None else NameNodeLoop(nn_id)
        q = settings.qjm
        self.transition_timeout = 30.0 + sum(
            (
                q.get_journal_state_timeout,
                q.new_epoch_timeout,
                q.prepare_recovery_timeout,
                q.accept_recovery_timeout,
                q.finalize_segment_timeout,
                q.select_input_streams_timeout,
                q.start_segment_timeout,
                q.write_txns_timeout,
            )
        )
        self._transition_lock = asyncio.Lock()
        # Cleared while a roll ends one segment and starts the next: mutations wait.
        self._writable = asyncio.Event()
        self._writable.set()
        self._state = HAState.INITIALIZING
        # False from the first step of leaving ACTIVE (before any I/O), True once ACTIVE is
        # fully open: reads and writes are refused while it is False, whatever the state.
        self._serving = False
        self._retry_cache = self._new_retry_cache()
        self._namespace = Namespace(retry_cache=self._retry_cache)
        self._edit_log: FSEditLog | None = None
        self._writer_qjm: JournalManager | None = None
        self._read_index: SharedRounds | None = None
        self._auto_roll: asyncio.Task[None] | None = None
        """The active's own roll of a segment grown past the threshold (none when it is 0)."""
        self._reader_qjm: JournalManager | None = None
        self._tailer: EditLogTailer | None = None
        self._checkpointer: StandbyCheckpointer | None = None
        self._tailing_enabled = False
        self._abort_tasks: set[asyncio.Task[None]] = set()
        self.last_failure: str | None = None
        """Why the last active period ended on its own (edit log failure), if it did."""
        self.startup = StartupProgress()
        """The phases of this NameNode's start (hanamenode.startup; the status page)."""
        self.history = TransitionHistory(settings.ha.transition_history)
        """Its HA transitions, with their causes (hanamenode.transitions; the status page)."""
        self._edits_from_txid = 1
        self._applied = AppliedTxid(lambda: self._namespace.last_applied_txid)
        self._observer_at_start = nn_id in settings.namenode_ids and (
            settings.namenode(nn_id).observer
        )
        self.on_leave_active: list[Callable[[str], None]] = []
        """Called on the loop, with the reason, as this NameNode stops answering as the
        active (the servicer ends its client sessions)."""
        self._log = log.bind(nn=nn_id)

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        """Load the newest image from the name dir, become STANDBY and start tailing (from a
        thread: starts the loop when this namesystem owns it)."""
        if self._owns_loop:
            self.nn_loop.start()
        self.nn_loop.run(self.start_async())

    def stop(self) -> None:
        """Leave ACTIVE (finalizing the segment when possible), stop every thread and task."""
        if self.nn_loop.running:
            self.nn_loop.run(self.stop_async())
        self.peers.close()
        if self._owns_loop:
            self.nn_loop.stop()
        self._log.info("namesystem stopped")

    async def start_async(self) -> None:
        async with self._transition():
            if self._state is not HAState.INITIALIZING:
                return
            started = time.perf_counter()
            progress = self.startup
            progress.begin(Phase.LOADING_FSIMAGE)
            try:
                image_txid = await self._load_newest_image()
            except Exception as exc:
                progress.fail(Phase.LOADING_FSIMAGE, describe_exception(exc))
                raise
            progress.end(
                Phase.LOADING_FSIMAGE,
                image=fsimage.image_name(image_txid),
                txid=image_txid,
                inodes=self._namespace.inode_count,
            )
            progress.begin(Phase.BECOMING_STANDBY)
            try:
                reader = await self.nn_loop.blocking(self._qjm_factory, self.ns_info)
            except Exception as exc:
                progress.fail(Phase.BECOMING_STANDBY, describe_exception(exc))
                raise
            self._reader_qjm = reader
            ha_settings = self.settings.ha
            self._tailer = EditLogTailer(
                self.apply_tailed,
                lambda: self._namespace.last_applied_txid,
                edit_source_for(reader),
                tail_period=ha_settings.tail_edits_period,
                roll_period=ha_settings.log_roll_period,
                peers=self.peers,
                metrics=self.metrics,
                nn_id=self.nn_id,
                in_progress=ha_settings.tail_edits_in_progress,
                push=ha_settings.tail_edits_push,
                max_txns=ha_settings.tail_edits_max_txns,
                nn_loop=self.nn_loop,
                on_target=self._edits_target,
                on_round=self._edits_round,
                asks_for_rolls=self._asks_for_rolls,
            )
            self._checkpointer = StandbyCheckpointer(
                lambda: self._namespace,
                self.name_dir,
                self.ns_info,
                checkpoint_txns=ha_settings.checkpoint_txns,
                checkpoint_period=ha_settings.checkpoint_period,
                checkpoints_retained=ha_settings.checkpoints_retained,
                peers=self.peers,
                metrics=self.metrics,
                nn_id=self.nn_id,
                nn_loop=self.nn_loop,
                on_thaw=self._tailer.apply_held,
            )
            self._state = HAState.OBSERVER if self._observer_at_start else HAState.STANDBY
            self._edits_from_txid = image_txid + 1
            # Begun before the tailer starts: its first good round ends it.
            progress.begin(Phase.LOADING_EDITS, from_txid=image_txid + 1, by="tailer")
            await self._start_standby_services()
            progress.end(Phase.BECOMING_STANDBY)
            self.history.entered()
            self._log.info(
                f"namesystem started as {self._state.value}",
                last_applied_txid=self._namespace.last_applied_txid,
                inodes=self._namespace.inode_count,
                seconds=round(time.perf_counter() - started, 3),
            )

    async def stop_async(self) -> None:
        async with self._transition():
            if self._state is HAState.STOPPING:
                return
            if self._state is HAState.ACTIVE:
                await self._leave_active("shutting down")
            self._state = HAState.STOPPING
            await self._stop_standby_services()
            if self._reader_qjm is not None:
                await self.nn_loop.blocking(self._reader_qjm.close)
                self._reader_qjm = None
        if self._abort_tasks:
            await asyncio.wait(self._abort_tasks, timeout=self.transition_timeout)

    # -- state ---------------------------------------------------------------------------------

    @property
    def state(self) -> HAState:
        return self._state

    @property
    def namespace(self) -> Namespace:
        """The current namespace (replaced when a failed active reloads its image)."""
        return self._namespace

    @property
    def retry_cache(self) -> RetryCache:
        return self._retry_cache

    @property
    def last_applied_txid(self) -> int:
        return self._namespace.last_applied_txid

    @property
    def edit_log(self) -> FSEditLog | None:
        return self._edit_log

    @property
    def tailer(self) -> EditLogTailer | None:
        return self._tailer

    @property
    def checkpointer(self) -> StandbyCheckpointer | None:
        return self._checkpointer

    def service_status(self) -> ServiceStatus:
        state = self._state
        ready = state in (HAState.STANDBY, HAState.ACTIVE)
        reason = "" if ready else f"the NameNode is {state.value}"
        if state is HAState.OBSERVER:
            reason = "an observer is never made active (make it standby first)"
        writer = self._writer_qjm
        return ServiceStatus(
            namenode_id=self.nn_id,
            state=state,
            ready_to_become_active=ready,
            not_ready_reason=reason,
            last_applied_txid=self._namespace.last_applied_txid,
            epoch=writer.epoch if writer is not None and state is HAState.ACTIVE else 0,
        )

    def check_health(self) -> None:
        """HealthCheckFailedError naming what is wrong, else return (MonitorHealth)."""
        state = self._state
        if state in (HAState.INITIALIZING, HAState.STOPPING):
            raise HealthCheckFailedError(f"the NameNode is {state.value}")
        edit_log = self._edit_log
        if state is HAState.ACTIVE and edit_log is not None and edit_log.failure is not None:
            raise HealthCheckFailedError(f"the edit log failed: {edit_log.failure}")
        tailer = self._tailer
        if state in TAILING_STATES and tailer is not None:
            exc = tailer.last_exception
            if isinstance(exc, EditLogReplayError):
                raise HealthCheckFailedError(f"the standby cannot apply the edit log: {exc}")

    def metrics_snapshot(self) -> StateSnapshot:
        edit_log = self._edit_log
        tailer = self._tailer
        standby = self._state in TAILING_STATES
        startup = self.startup_status()
        return StateSnapshot(
            ha_state=self._state.value,
            last_applied_txid=self._namespace.last_applied_txid,
            synced_txid=edit_log.synced_txid if edit_log is not None else 0,
            tailer_lag_txns=tailer.lag_txns if tailer is not None and standby else 0,
            seconds_since_last_tail=(
                tailer.seconds_since_last_load() if tailer is not None and standby else 0.0
            ),
            newest_image_txid=self.name_dir.newest_image_txid() or 0,
            inodes=self._namespace.inode_count,
            retry_cache_entries=len(self._retry_cache),
            journals=self._journal_names(self.journal_status()),
            startup_complete=startup["complete"],
            startup_phases=tuple(
                (
                    phase["name"],
                    phase["status"],
                    phase["elapsed_seconds"],
                    phase["details"].get("inodes", phase["details"].get("applied")),
                )
                for phase in startup["phases"]
            ),
        )

    def journal_status(self) -> tuple[tuple[str, str], ...]:
        """The active writer's JournalNodes and why each is out of sync ("" when in sync):
        a full disk on a JournalNode shows here as "...No space left on device [ENOSPC]"."""
        writer = self._writer_qjm
        if not isinstance(writer, QuorumJournalManager) or self._state is not HAState.ACTIVE:
            return ()  # the ZooKeeper journal has no JournalNodes
        return tuple(
            (lg.address, lg.out_of_sync_cause if lg.out_of_sync else "")
            for lg in writer.loggers.loggers
        )

    def _journal_names(
        self, status: tuple[tuple[str, str], ...]
    ) -> tuple[tuple[str, str, str], ...]:
        """``journal_status`` with each JournalNode's configured id first (its address when
        none is configured): the metric's labels."""
        writer = self._writer_qjm
        if not isinstance(writer, QuorumJournalManager):
            return ()
        names = {lg.address: lg.node_id for lg in writer.loggers.loggers}
        return tuple((names.get(address, address), address, cause) for address, cause in status)

    # -- transitions are serialized ------------------------------------------------------------

    @asynccontextmanager
    async def _transition(self) -> AsyncIterator[None]:
        try:
            async with asyncio.timeout(self.transition_timeout):
                await self._transition_lock.acquire()
        except TimeoutError:
            raise ServiceFailedError(
                f"another state transition did not finish within {self.transition_timeout:.0f}s"
            ) from None
        try:
            yield
        finally:
            self._transition_lock.release()

    # -- client mutations (coroutines on the loop) ----------------------------------------------

    async def mkdirs_async(
        self,
        path: str,
        *,
        create_parent: bool = False,
        permission: int = 0,
        client_id: bytes = b"",
        call_id: int = 0,
    ) -> Mutation[bool]:
        """mkdir (``create_parent``: mkdir -p). ``result`` is False when ``create_parent`` is
        set and the directory existed (nothing logged)."""
        perm = permission or DIR_PERMISSION
        result, txid = await self._mutate(
            "mkdir",
            client_id,
            call_id,
            lambda ns: ns.prepare_mkdir(
                path, parents=create_parent, permission=perm, client_id=client_id,
                call_id=call_id,
            ),
            none_result=False,
        )
        return Mutation(bool(result), txid)

    async def create_async(
        self,
        path: str,
        *,
        overwrite: bool = False,
        permission: int = 0,
        length: int = 0,
        replication: int = 0,
        client_id: bytes = b"",
        call_id: int = 0,
    ) -> Mutation[StatInfo]:
        perm = permission or FILE_PERMISSION
        repl = replication or DEFAULT_REPLICATION
        result, txid = await self._mutate(
            "create",
            client_id,
            call_id,
            lambda ns: ns.prepare_create(
                path, overwrite=overwrite, permission=perm, length=length, replication=repl,
                client_id=client_id, call_id=call_id,
            ),
        )
        return Mutation(cast(StatInfo, result), txid)

    async def delete_async(
        self, path: str, *, recursive: bool = False, client_id: bytes = b"", call_id: int = 0
    ) -> Mutation[bool]:
        result, txid = await self._mutate(
            "delete",
            client_id,
            call_id,
            lambda ns: ns.prepare_delete(
                path, recursive=recursive, client_id=client_id, call_id=call_id
            ),
        )
        return Mutation(bool(result), txid)

    async def rename_async(
        self, src: str, dst: str, *, client_id: bytes = b"", call_id: int = 0
    ) -> Mutation[str]:
        """Move ``src`` to ``dst`` (into it when it is a directory); ``result`` is the final
        path."""
        result, txid = await self._mutate(
            "rename",
            client_id,
            call_id,
            lambda ns: ns.prepare_rename(src, dst, client_id=client_id, call_id=call_id),
        )
        return Mutation(str(result), txid)

    async def multi_async(
        self, steps: Sequence[Step], *, client_id: bytes = b"", call_id: int = 0
    ) -> Mutation[list[object]]:
        """Apply ``steps`` (``mkdir_step``, ``create_step``...) as one transaction: every one,
        in order, or none (docs/consistency.md §11). ``result`` holds each step's answer
        (False for a mkdir -p of an existing directory); a refusal is the first refused
        step's error with ``multi_index``. Retry-cached as one call."""
        limit = self.settings.ha.multi_max_ops
        if not steps:
            raise InvalidArgumentError("a multi needs at least one op")
        if len(steps) > limit:
            raise InvalidArgumentError(
                f"a multi holds at most {limit} ops (dfs.namenode.multi.max-ops), not "
                f"{len(steps)}"
            )
        result, txid = await self._mutate(
            "multi",
            client_id,
            call_id,
            lambda ns: ns.tentative_multi(steps, client_id=client_id, call_id=call_id),
        )
        return Mutation(cast(list[object], result), txid)

    # The same calls from a thread that is not the loop's (tests, tools): one bridge each.

    def multi(self, steps: Sequence[Step], **kwargs: Any) -> Mutation[list[object]]:
        return self.nn_loop.run(self.multi_async(steps, **kwargs))

    def mkdirs(self, path: str, **kwargs: Any) -> Mutation[bool]:
        return self.nn_loop.run(self.mkdirs_async(path, **kwargs))

    def create(self, path: str, **kwargs: Any) -> Mutation[StatInfo]:
        return self.nn_loop.run(self.create_async(path, **kwargs))

    def delete(self, path: str, **kwargs: Any) -> Mutation[bool]:
        return self.nn_loop.run(self.delete_async(path, **kwargs))

    def rename(self, src: str, dst: str, **kwargs: Any) -> Mutation[str]:
        return self.nn_loop.run(self.rename_async(src, dst, **kwargs))

    def _serving_edit_log(self, category: str) -> FSEditLog:
        """The edit log of an active that may answer; StandbyError when this NameNode is not
        active, is leaving the active state, or its edit log failed (fenced, quorum lost)."""
        state = self._state
        edit_log = self._edit_log
        if state is not HAState.ACTIVE or not self._serving or edit_log is None:
            shown = state.value if state is not HAState.ACTIVE else "leaving active"
            raise StandbyError.for_category(category, shown)
        failure = edit_log.failure
        if failure is not None:
            raise StandbyError(
                f"Operation category {category} is not supported: this NameNode is leaving "
                f"the active state ({failure})"
            )
        return edit_log

    async def _confirm_answer(
        self, edit_log: FSEditLog, observed_txid: int, category: str = "READ"
    ) -> None:
        """Before answering from the namespace without logging (a read, a no-op or refused
        mutation): wait until every edit the answer observed is durable, and confirm with a
        JournalNode quorum that this writer still holds its epoch (a read-index round that
        began after the call arrived, shared by every call waiting for one). Raises
        StandbyError or EditLogError otherwise."""
        if not active(Mutant.ANSWER_WITHOUT_DURABILITY):
            await edit_log.log_sync(observed_txid)
        if active(Mutant.READ_WITHOUT_QUORUM_CONFIRMATION):
            return
        rounds = self._read_index
        try:
            if rounds is None or edit_log.qjm is not self._writer_qjm:
                raise QJMError("this writer is closed")
            await rounds.confirm()
        except Exception as exc:
            raise StandbyError(
                f"Operation category {category} is not supported: this NameNode could not confirm "
                f"with a JournalNode quorum that it is still the active: "
                f"{describe_exception(exc)}"
            ) from exc

    async def _writes_open(self) -> FSEditLog:
        """The serving edit log, once no roll keeps writes out (a roll ends one segment and
        starts the next: nothing may be logged between the two)."""
        edit_log = self._serving_edit_log("WRITE")
        while not self._writable.is_set():
            await self._writable.wait()
            edit_log = self._serving_edit_log("WRITE")
        return edit_log

    async def _mutate(
        self,
        kind: str,
        client_id: bytes,
        call_id: int,
        prepare: Callable[[Namespace], edits_pb2.EditOp | TentativeMulti | None],
        none_result: object = None,
    ) -> tuple[object, int]:
        """Run the mutation ``kind`` (the edit op's name: ``mkdir``, ``create``...) once per
        ``(client_id, call_id)``: a retry gets the first answer from the retry cache. A
        multi comes prepared as a ``TentativeMulti``, already applied: logging keeps it,
        and it is rolled back if it cannot be logged."""
        edit_log = await self._writes_open()
        # From here to log_and_apply there is no await: nothing else runs on the namesystem
        # (the loop is the lock), so a retry racing its original finds it in the cache. An
        # answer that logs nothing (a refusal, a no-op) is cached only after its confirmation
        # round; a retry racing it meanwhile runs again, which logs nothing either, unless
        # the namespace changed meanwhile: then the retry's answer is the one kept (the
        # cache keeps the first entry recorded for a call).
        cache = self._retry_cache
        cached = cache.lookup(client_id, call_id, kind)
        if cached is not None:
            return await self._answer_retry(cached)
        namespace = self._namespace
        try:
            op = prepare(namespace)
        except NamenodeError as exc:
            # What this refusal observed: the state it decided on. It is remembered for
            # retries only once confirmed: a deposed active's refusal, decided on a stale
            # namespace, must not be the answer a retry gets if this NameNode is made active
            # again later (nnsim seed 6 with e93b37d).
            observed = edit_log.last_written_txid
            await self._confirm_answer(edit_log, observed, "WRITE")
            cache.record_failure(client_id, call_id, exc, op=kind)
            ANSWER_TXID.set(observed)  # only once durable: a client never waits for less
            raise
        if op is None:
            observed = edit_log.last_written_txid
            await self._confirm_answer(edit_log, observed, "WRITE")
            cache.record_success(client_id, call_id, none_result, txid=0, op=kind)
            ANSWER_TXID.set(observed)
            return none_result, 0
        if isinstance(op, TentativeMulti):
            try:
                txid, result = edit_log.log_and_apply(op.op, op.apply)
            except BaseException:
                op.roll_back()  # not logged: nothing of it may stay (a no-op once kept)
                raise
        else:
            txid, result = edit_log.log_and_apply(op, namespace.apply)
        await edit_log.log_sync(txid)
        ANSWER_TXID.set(txid)
        return result, txid

    async def _answer_retry(self, entry: CacheEntry) -> tuple[object, int]:
        """The first answer to a retried call, once the transaction that made it is durable
        (an answer that logged nothing, once what it observed is, confirmed as a read)."""
        edit_log = self._serving_edit_log("WRITE")
        observed = min(entry.txid, edit_log.last_written_txid) or edit_log.last_written_txid
        if entry.txid and active(Mutant.RETRY_ANSWER_BEFORE_DURABLE):
            pass
        elif entry.txid:
            await edit_log.log_sync(observed)
        else:
            await self._confirm_answer(edit_log, observed, "WRITE")
        ANSWER_TXID.set(observed)
        self._log.debug(
            "answered a retry from the retry cache", call_id=entry.call_id, txid=entry.txid
        )
        return entry.answer(), entry.txid

    # -- client reads (coroutines on the loop) ---------------------------------------------------

    async def _read(
        self, allow_stale_read: bool, read: Callable[[Namespace], T], seen_txid: int = 0
    ) -> T:
        """Answer ``read`` of the namespace. A stale read (asked for by the client) is served
        at once by an active, an observer or a standby. An observer serves any other read
        once it has applied ``seen_txid``, the highest txid the client has seen (§9 of
        docs/consistency.md: read-your-writes, monotonic reads). Any other read only by a
        serving active, once the edits it observed are durable and a JournalNode quorum
        confirmed the epoch after the read arrived (issue 11, docs/consistency.md §4.1):
        linearizable."""
        state = self._state
        if allow_stale_read and state in (HAState.ACTIVE, *TAILING_STATES):
            ANSWER_TXID.set(self._namespace.last_applied_txid)
            return read(self._namespace)
        if state is HAState.OBSERVER:
            await self._await_applied(seen_txid)
            if self._state is not HAState.OBSERVER:  # made a standby meanwhile
                raise StandbyError.for_category("READ", self._state.value)
            ANSWER_TXID.set(self._namespace.last_applied_txid)
            return read(self._namespace)
        edit_log = self._serving_edit_log("READ")
        observed = edit_log.last_written_txid
        try:
            answer: T | None = read(self._namespace)
            error: NamenodeError | None = None
        except NamenodeError as exc:
            answer, error = None, exc
        await self._confirm_answer(edit_log, observed)
        ANSWER_TXID.set(observed)  # only once durable and confirmed
        if error is not None:
            raise error
        return cast(T, answer)

    async def _await_applied(self, seen_txid: int) -> None:
        """On an observer: return once ``seen_txid`` is applied; ObserverBehindError after
        ``dfs.namenode.observer.read.max-wait.ms`` (the client asks another NameNode)."""
        wait = self.settings.ha.observer_read_max_wait
        if await self._applied.wait_for(seen_txid, wait):
            self.metrics.observer_reads.labels("served").inc()
            return
        self.metrics.observer_reads.labels("behind").inc()
        if self._state is not HAState.OBSERVER:
            raise StandbyError.for_category("READ", self._state.value)
        raise ObserverBehindError(
            f"Operation category READ: observer {self.nn_id} has applied txid "
            f"{self._namespace.last_applied_txid}, behind txid {seen_txid} that the client has "
            f"seen, after waiting {wait:g}s; ask another NameNode"
        )

    async def get_file_info_async(
        self, path: str, *, allow_stale_read: bool = False, seen_txid: int = 0
    ) -> StatInfo:
        return await self._read(allow_stale_read, lambda ns: ns.stat(path), seen_txid)

    async def get_listing_async(
        self, path: str, *, allow_stale_read: bool = False, seen_txid: int = 0
    ) -> list[StatInfo]:
        return await self._read(allow_stale_read, lambda ns: ns.list(path), seen_txid)

    async def get_listing_page_async(
        self,
        path: str,
        *,
        start_after: str = "",
        limit: int = 0,
        allow_stale_read: bool = False,
        seen_txid: int = 0,
    ) -> tuple[list[StatInfo], bool]:
        """One page of a listing (``Namespace.list_page``): at most ``limit`` entries, and
        at most ``dfs.ls.limit`` whatever the caller asks (0: that many); whether more
        follow. Each page is its own read, linearizable as any (docs/protocol.md §13.6)."""
        cap = self.settings.ha.ls_limit
        count = min(limit, cap) if limit else cap
        return await self._read(
            allow_stale_read,
            lambda ns: ns.list_page(
                path, start_after=start_after, limit=count, max_bytes=LISTING_PAGE_BYTES
            ),
            seen_txid,
        )

    async def msync_async(self) -> int:
        """The active's latest txid, once it is durable and a read-index round confirmed this
        NameNode is still the active (HDFS-13688's msync): what a client must have seen to
        see every mutation acknowledged before it called. A standby or observer refuses
        with StandbyError, so the client asks the active."""
        edit_log = self._serving_edit_log("READ")
        txid = edit_log.last_written_txid
        await self._confirm_answer(edit_log, txid)
        ANSWER_TXID.set(txid)
        return txid

    def msync(self) -> int:
        return self.nn_loop.run(self.msync_async())

    def get_file_info(self, path: str, *, allow_stale_read: bool = False) -> StatInfo:
        return self.nn_loop.run(self.get_file_info_async(path, allow_stale_read=allow_stale_read))

    def get_listing(self, path: str, *, allow_stale_read: bool = False) -> list[StatInfo]:
        return self.nn_loop.run(self.get_listing_async(path, allow_stale_read=allow_stale_read))

    # -- tailing (the tailer task's reads run on a bridge thread) --------------------------------

    def apply_tailed(self, ops: list[edits_pb2.EditOp]) -> int:
        """Apply ops read by the tailer (in its bridge thread), in order, on the loop, which
        owns the namespace: one hop per batch. How many were applied: fewer than given once
        tailing is disabled (a transition)."""
        return self.nn_loop.call(self._apply_tailed_on_loop, ops)

    def _apply_tailed_on_loop(self, ops: list[edits_pb2.EditOp]) -> int:
        namespace = self._namespace
        if not self._tailing_enabled or namespace.frozen:
            # A transition, or a checkpoint reading the tree: none now. Pushed ops stay with
            # the tailer (applied at the thaw); a round stops and the next one reads again.
            return 0
        for op in ops:
            # Pushed edits and a fallback round may both bring a txid; both bring only
            # txids no recovery takes back, so the copies are the same op: apply it once.
            if op.txid > namespace.last_applied_txid:
                namespace.apply(op)
        self._applied.advanced(namespace.last_applied_txid)
        return len(ops)

    def _apply_for_catch_up(self, op: edits_pb2.EditOp) -> bool:
        # Runs in the transition's bridge thread: the state is neither serving nor tailing,
        # so nothing else changes the namespace meanwhile (stale reads only read it).
        with self._namespace.lock:
            self._namespace.apply(op)
        return True

    def _asks_for_rolls(self) -> bool:
        """Whether this follower asks the active to roll when the roll period has passed (from
        the tailer's thread). The standby does. An observer that tails the in-progress segment
        does not, unless dfs.ha.log-roll.observers says so: its edits come without rolls, and
        each observer's rolls would add two JournalNode round trips a period to the active's
        writes, for nothing the standby's rolls do not already give (HDFS-16513 proposed the
        same; HDFS-17924 lets followers opt out). One that reads finalized segments only must
        ask, or it sees nothing until someone else rolls."""
        if self._state is not HAState.OBSERVER:
            return True
        ha_settings = self.settings.ha
        return ha_settings.log_roll_by_observers or not ha_settings.tail_edits_in_progress

    # -- the active's own rolls ---------------------------------------------------------------

    def _start_auto_roll(self, edit_log: FSEditLog) -> None:
        ha_settings = self.settings.ha
        threshold = int(ha_settings.autoroll_multiplier * ha_settings.checkpoint_txns)
        if threshold <= 0:
            return
        self._auto_roll = asyncio.get_running_loop().create_task(
            self._auto_roll_loop(edit_log, threshold, ha_settings.autoroll_check_interval),
            name=f"auto-roll-{self.nn_id}",
        )

    async def _auto_roll_loop(self, edit_log: FSEditLog, threshold: int, interval: float) -> None:
        """Roll a segment that holds ``threshold`` edits or more, whether or not a follower
        asks (HDFS's autoroll): without a standby, or with observers that do not ask, the
        open segment would otherwise grow without end, and nothing before it could be
        purged. Ends when this edit log stops being the serving one."""
        while True:
            await asyncio.sleep(interval)
            if self._edit_log is not edit_log or edit_log.failure is not None:
                return
            segment = edit_log.segment_txid
            written = edit_log.last_written_txid
            if segment is None or written == segment or written - segment + 1 < threshold:
                continue  # (a segment of its start marker alone is never rolled)
            self._log.info(
                "rolling the edit log by itself",
                segment=segment,
                txns=written - segment + 1,
                threshold=threshold,
            )
            try:
                await self.roll_edit_log_async()
            except NamenodeError as exc:
                # The edit log failed with it (the NameNode leaves ACTIVE), or a step-down
                # began: either way this loop is done.
                self._log.warning("rolling the edit log by itself failed", error=str(exc))
                return
            except Exception as exc:
                # A bug, not a state of the log: say so, and try again at the next check
                # rather than leave the segment to grow with nobody rolling it.
                self._log.error(
                    "rolling the edit log by itself raised; trying again at the next check",
                    error=describe_exception(exc),
                    segment=segment,
                    interval_seconds=interval,
                )

    # -- the active's NamenodeProtocol ----------------------------------------------------------

    async def roll_edit_log_async(self) -> int:
        """Finalize the current segment and start the next (the standby's request); the new
        segment's first txid. A segment holding only its start marker is not rolled. Writes
        wait at the write gate meanwhile."""
        edit_log = await self._writes_open()
        segment = edit_log.segment_txid
        if segment is not None and edit_log.last_written_txid == segment:
            return segment
        # The gate closes here, with no await since it was found open: one roll at a time
        # gets through (the standby's and an observer's rolls come together), and nothing
        # is logged between a segment's end marker and its finalize. Closed in the task
        # instead, a second roll started as the first reopened the gate, and the writes
        # logged after its end marker made the JournalNodes refuse its finalize.
        if not active(Mutant.ROLL_GATE_IN_TASK):
            self._writable.clear()
        # Its own task, shielded: a caller that goes away (the follower killed, its deadline
        # passed: gRPC cancels the call) must not stop the roll between the finalized segment
        # and the next one, where every write would be refused for want of a segment.
        roll = asyncio.get_running_loop().create_task(
            self._roll(edit_log), name=f"roll-edit-log-{self.nn_id}"
        )
        roll.add_done_callback(self._roll_done)
        return await asyncio.shield(roll)

    def _roll_done(self, roll: asyncio.Task[int]) -> None:
        """Log a failed roll here too: its caller may have gone away (the edit log failed
        with it, so this NameNode is leaving ACTIVE)."""
        error = None if roll.cancelled() else roll.exception()
        if error is not None:
            self._log.error("rolling the edit log failed", error=describe_exception(error))

    async def _roll(self, edit_log: FSEditLog) -> int:
        """The roll proper; the write gate was closed for it, and it reopens it."""
        if active(Mutant.ROLL_GATE_IN_TASK):
            self._writable.clear()
        try:
            return await edit_log.roll(self._namespace.apply)
        finally:
            self._writable.set()

    def roll_edit_log(self) -> int:
        return self.nn_loop.run(self.roll_edit_log_async())

    async def purge_logs_async(self, min_txid_to_keep: int) -> int:
        """Purge finalized segments wholly below ``min_txid_to_keep`` on the JournalNodes,
        never beyond what this NameNode's own newest image covers; return the bound used."""
        if self._state is not HAState.ACTIVE:
            raise StandbyError.for_category("JOURNAL", self._state.value)
        qjm = self._writer_qjm
        assert qjm is not None
        own = self.name_dir.newest_image_txid()
        bound = min(min_txid_to_keep, (own or 0) + 1)
        if bound < min_txid_to_keep:
            self._log.info(
                "purge bound lowered to this NameNode's newest image",
                asked=min_txid_to_keep,
                used=bound,
            )
        if bound <= 1:
            return bound
        await qjm.apurge_logs_older_than(bound)
        self.metrics.purges.inc()
        self._log.info("purged edit logs", min_txid_to_keep=bound)
        return bound

    def purge_logs(self, min_txid_to_keep: int) -> int:
        return self.nn_loop.run(self.purge_logs_async(min_txid_to_keep))

    def most_recent_checkpoint(self) -> ha.CheckpointInfo | None:
        return checkpoint_info(self.name_dir)

    def image_path(self, txid: int) -> Path:
        """The image for ``txid`` after checking its md5 (GetImage)."""
        for image_txid, path in self.name_dir.images():
            if image_txid == txid:
                fsimage.verify_md5(path)
                return path
        raise ImageNotFoundError(f"no fsimage for txid {txid} in {self.name_dir.path}")

    def install_uploaded_image(self, txid: int, md5: str, chunks: Iterable[bytes]) -> Path:
        """Store an image uploaded by a standby's checkpointer (PutImage), then keep the
        newest ``checkpoints_retained`` (blocking file I/O: a bridge thread calls it)."""
        if self._state is not HAState.ACTIVE:
            raise StandbyError.for_category("CHECKPOINT", self._state.value)
        path = fsimage.install_image(self.name_dir.path, txid, chunks, md5)
        fsimage.purge_old_images(self.name_dir.path, self.settings.ha.checkpoints_retained)
        self._log.info("installed checkpoint uploaded by a standby", txid=txid)
        return path

    # -- transitions (coroutines on the loop; the *_async names) ---------------------------------

    def transition_to_active(self, cause: Cause = Cause.MANUAL, detail: str = "") -> None:
        """From a thread (the elector, tests): ``transition_to_active_async`` on the loop.
        ``cause`` and ``detail`` go to the failover history (``history``)."""
        self.nn_loop.run(self.transition_to_active_async(cause, detail))

    def transition_to_standby(self, cause: Cause = Cause.MANUAL, detail: str = "") -> None:
        self.nn_loop.run(self.transition_to_standby_async(cause, detail))

    def transition_to_observer(self) -> None:
        self.nn_loop.run(self.transition_to_observer_async())

    def _record(self, was: HAState, cause: Cause, detail: str, started: float,
                seconds: float) -> None:
        """A transition from ``was`` to the present state, begun at wall time ``started``."""
        self.history.record(was, self._state, cause, detail, started=started, seconds=seconds)

    async def transition_to_observer_async(self, cause: Cause = Cause.MANUAL) -> None:
        """STANDBY -> OBSERVER (a no-op when already an observer): only the state changes,
        since both tail the log alike. Refused from any other state: an active must be made
        standby first, by the elector or by hand."""
        async with self._transition():
            if self._state is HAState.OBSERVER:
                return
            if self._state is not HAState.STANDBY:
                raise ServiceFailedError(
                    f"cannot become an observer: NameNode {self.nn_id} is "
                    f"{self._state.value}; only a standby can (make it standby first)"
                )
            self._state = HAState.OBSERVER
            self._record(HAState.STANDBY, cause, "", clock.time(), 0.0)
            self.metrics.transitions.labels("observer").inc()
            self._log.info("now observer")

    async def transition_to_active_async(
        self, cause: Cause = Cause.MANUAL, detail: str = ""
    ) -> None:
        """STANDBY -> ACTIVE (a no-op when already active). ServiceFailedError naming the
        failed step otherwise; the NameNode is then standby again."""
        async with self._transition():
            if self._state is HAState.ACTIVE:
                return
            if self._state is HAState.OBSERVER:
                raise ServiceFailedError(
                    f"cannot become active: NameNode {self.nn_id} is an observer, which is "
                    "never made active; make it standby first (hactl transition-to-standby)"
                )
            if self._state is not HAState.STANDBY:
                raise ServiceFailedError(
                    f"cannot become active: the NameNode is {self._state.value}"
                )
            started, wall_started = time.perf_counter(), clock.time()
            self._log.info("transitioning to active")
            # The first election's winner replays the edits of its startup here.
            progress = self.startup
            in_startup = progress.status(Phase.LOADING_EDITS) is PhaseStatus.RUNNING and (
                progress.begin(Phase.BECOMING_ACTIVE)
            )
            await self._stop_standby_services()
            blocking = self.nn_loop.blocking
            qjm: JournalManager | None = None
            edit_log: FSEditLog | None = None
            step = "connecting to the JournalNodes"
            try:
                # Made on the loop: its first awaited call binds it (and its grpc.aio
                # channels) to this loop (docs/architecture.md §4.6).
                qjm = self._qjm_factory(self.ns_info)
                step = "fencing earlier writers and recovering the unfinalized segment"
                end = await qjm.arecover_unfinalized_segments()
                # These two events time the transition's parts (bench/failover.py reads them).
                self._log.info("recovered the edit log", epoch=qjm.epoch, end_txid=end)
                progress.update(Phase.BECOMING_ACTIVE, epoch=qjm.epoch, recovered_txid=end)
                progress.update(Phase.LOADING_EDITS, target_txid=end, by="transition to active")
                step = f"reading the log up to txid {end}"
                assert self._tailer is not None
                applied = await blocking(
                    self._tailer.catch_up, qjm, end, self._apply_for_catch_up
                )
                self._log.info(
                    "caught up with the edit log",
                    applied=applied,
                    last_applied_txid=self._namespace.last_applied_txid,
                )
                self._end_loading_edits()
                step = "opening the edit log for write"
                first = ha.next_segment_txid(self._namespace.last_applied_txid, end)
                writer = qjm
                edit_log = FSEditLog(
                    writer,
                    on_failure=lambda reason: self._on_edit_log_failure(writer, reason),
                    metrics=self.metrics,
                    max_batch_bytes=self.settings.ha.edits_sync_max_batch_bytes,
                    gather_delay=self.settings.ha.edits_sync_gather_delay,
                    syncs_in_flight=self.settings.ha.edits_sync_in_flight,
                    log_context={"nn": self.nn_id},
                )
                await edit_log.open_for_write(first, self._namespace.apply)
                self._edit_log = edit_log
                self._writer_qjm = qjm
                # Rounds awaited on this loop (the QJM's), shared by the coroutines waiting.
                self._read_index = SharedRounds(writer.aconfirm_epoch)
                self._writable.set()
                self._state = HAState.ACTIVE
                self._serving = True
                qjm.start_heartbeats()  # a task on this loop, the QJM's
                self._start_auto_roll(edit_log)
            except Exception as exc:
                self._log.error("transition to active failed", step=step, error=str(exc))
                if in_startup:
                    progress.fail(
                        Phase.BECOMING_ACTIVE, f"{step} failed: {describe_exception(exc)}"
                    )
                    progress.update(Phase.LOADING_EDITS, by="tailer")  # if not loaded yet
                self._serving = False
                self._edit_log = None
                self._writer_qjm = None
                self._read_index = None
                if edit_log is not None:
                    await edit_log.close(self._namespace.apply)
                if qjm is not None:
                    await qjm.aclose()
                if edit_log is not None and self._namespace.last_applied_txid > (
                    edit_log.synced_txid
                ):
                    await self._reload_namespace("the new segment's first edit was not durable")
                self._state = HAState.STANDBY
                await self._start_standby_services()
                raise ServiceFailedError(
                    f"cannot become active: {step} failed: {describe_exception(exc)}"
                ) from exc
            self.last_failure = None
            if in_startup:
                progress.end(Phase.BECOMING_ACTIVE, first_txid=first)
            elapsed = time.perf_counter() - started
            self._record(HAState.STANDBY, cause, detail, wall_started, elapsed)
            self.metrics.transitions.labels("active").inc()
            self.metrics.transition_seconds.labels("active").observe(elapsed)
            self._log.info(
                "now active",
                epoch=qjm.epoch,
                first_txid=first,
                seconds=round(elapsed, 3),
            )

    async def transition_to_standby_async(
        self, cause: Cause = Cause.MANUAL, detail: str = ""
    ) -> None:
        """ACTIVE -> STANDBY (a no-op when already standby)."""
        async with self._transition():
            if self._state is HAState.STANDBY:
                return
            if self._state is HAState.OBSERVER:
                self._state = HAState.STANDBY
                self._record(HAState.OBSERVER, cause, detail, clock.time(), 0.0)
                self.metrics.transitions.labels("standby").inc()
                self._log.info("now standby", reason="requested, was an observer")
                return
            if self._state is not HAState.ACTIVE:
                raise ServiceFailedError(
                    f"cannot become standby: the NameNode is {self._state.value}"
                )
            await self._become_standby("requested", cause, detail)

    async def _become_standby(self, reason: str, cause: Cause, detail: str) -> None:
        started, wall_started = time.perf_counter(), clock.time()
        await self._leave_active(reason)
        await self._start_standby_services()
        elapsed = time.perf_counter() - started
        self._record(HAState.ACTIVE, cause, detail or reason, wall_started, elapsed)
        self.metrics.transitions.labels("standby").inc()
        self.metrics.transition_seconds.labels("standby").observe(elapsed)
        self._log.info("now standby", reason=reason, seconds=round(elapsed, 3))

    async def _leave_active(self, reason: str) -> None:
        """Stop answering as the active, then end and finalize the segment when possible,
        close the writer, and reload the namespace when it holds edits that are not durable.
        Calls that arrive meanwhile find a NameNode that is leaving ACTIVE from the first
        line on (issue 11: the END-op sync and the finalize are network I/O that may last the
        write timeout); calls already waiting for their sync get their answer once it is
        durable."""
        self._log.info("leaving active state", reason=reason)
        auto_roll, self._auto_roll = self._auto_roll, None
        if auto_roll is not None:
            auto_roll.cancel()  # a roll it started goes on (shielded); the close waits for it
        if not active(Mutant.STEP_DOWN_SERVES_DURING_IO):
            # Before any I/O (the END-op sync and the finalize may take the write timeout,
            # or hang): from here on, nothing is answered as the active.
            self._serving = False
        for listener in self.on_leave_active:
            try:
                listener(reason)
            except Exception:
                self._log.exception("a leave-active listener failed", reason=reason)
        edit_log, qjm = self._edit_log, self._writer_qjm
        if edit_log is not None:
            try:
                await edit_log.close(self._namespace.apply)
            except EditLogError as exc:
                self._log.warning(
                    "could not finalize the segment; the next active's recovery will",
                    error=str(exc),
                )
            if self._namespace.last_applied_txid > edit_log.synced_txid:
                await self._reload_namespace(
                    f"edits after txid {edit_log.synced_txid} were applied but never durable"
                )
        self._serving = False
        self._state = HAState.STANDBY
        self._edit_log = None
        self._writer_qjm = None
        self._read_index = None
        self._writable.set()  # gate waiters wake and find STANDBY
        if qjm is not None:
            await qjm.aclose()

    def _on_edit_log_failure(self, writer: JournalManager, reason: str) -> None:
        """Called by the failing edit log, on the loop: leave ACTIVE from a task of its own,
        since the failing coroutine may be part of a transition."""
        self.last_failure = reason
        task = self.nn_loop.loop.create_task(
            self._abort_active(writer, reason), name=f"ha-abort-{self.nn_id}"
        )
        self._abort_tasks = {t for t in self._abort_tasks if not t.done()} | {task}

    async def _abort_active(self, writer: JournalManager, reason: str) -> None:
        try:
            async with self._transition():
                if self._writer_qjm is not writer or self._state is not HAState.ACTIVE:
                    return  # that active period already ended
                self._log.error("leaving active state: the edit log failed", reason=reason)
                await self._become_standby(
                    f"edit log failed: {reason}", edit_log_failure_cause(reason), ""
                )
        except Exception:
            self._log.exception("could not leave active state after an edit log failure")

    # -- standby services (tasks on the loop) -------------------------------------------------

    async def _start_standby_services(self) -> None:
        self._tailing_enabled = True
        if self._tailer is not None:
            self._tailer.start()
        if self._checkpointer is not None:
            self._checkpointer.start()

    async def _stop_standby_services(self) -> None:
        self._tailing_enabled = False
        tailer, checkpointer = self._tailer, self._checkpointer
        if tailer is not None:
            await tailer.stop()
        if checkpointer is not None:
            await checkpointer.stop()

    # -- startup progress ----------------------------------------------------------------------

    def _edits_target(self, highest_txid: int) -> None:
        """The tailer read the manifests (a bridge thread): how far the log goes."""
        self.startup.update(Phase.LOADING_EDITS, target_txid=highest_txid)

    def _edits_round(self, result: LoadResult) -> None:
        """The tailer finished a round (a bridge thread): the first ends the startup's
        replay."""
        self._end_loading_edits()

    def _end_loading_edits(self) -> None:
        last = self._namespace.last_applied_txid
        if self.startup.end(
            Phase.LOADING_EDITS,
            last_txid=last,
            applied=max(0, last - self._edits_from_txid + 1),
        ):
            self._log.info(
                "loaded the edits of the startup",
                from_txid=self._edits_from_txid,
                last_txid=last,
            )

    def startup_status(self) -> dict[str, Any]:
        """``/status.json``'s ``startup`` (hanamenode.startup.describe)."""
        return describe(
            self.startup.records(),
            now=clock.monotonic(),
            last_applied_txid=self._namespace.last_applied_txid,
        )

    # -- images --------------------------------------------------------------------------------

    def _new_retry_cache(self) -> RetryCache:
        if self._retry_cache_capacity is None:
            return RetryCache()
        return RetryCache(capacity=self._retry_cache_capacity)

    async def _load_newest_image(self) -> int:
        """Load the newest usable image; its txid."""
        cache = self._new_retry_cache()
        namespace, txid, _ = await self.nn_loop.blocking(self.name_dir.load_newest_image, cache)
        self._namespace = namespace
        self._retry_cache = cache
        self._log.info("loaded fsimage", txid=txid, inodes=namespace.inode_count)
        return txid

    async def _reload_namespace(self, why: str) -> None:
        dropped = self._namespace.last_applied_txid
        await self._load_newest_image()
        self._log.warning(
            "reloaded the namespace from the newest image; the tailer replays the durable log",
            why=why,
            was_at_txid=dropped,
            now_at_txid=self._namespace.last_applied_txid,
        )

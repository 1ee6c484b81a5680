"""EditLogTailer: the standby follows the shared edit log (docs/architecture.md §5.4; HDFS
``EditLogTailer``).

Every ``tail_edits_period`` the tailer asks the JournalNodes for their manifests from
``last_applied_txid + 1``, chains the finalized segments (``qjm.reader.chain_segments``, each a
``RedundantEditLogInputStream`` that switches JournalNode on a failure mid-read) and applies
every op. The active only finalizes a segment when it rolls, so every ``log_roll_period`` the
tailer asks the active (whichever of the other NameNodes answers as active) to roll its log.

With in-progress tailing and ``push`` (dfs.ha.tail-edits.push), an ``EditSubscriber``
(``qjm.subscriber``) holds a SubscribeEdits stream open on every JournalNode, on the loop,
and each push applies at once what a majority of JournalNodes pushed in one writer epoch (the
rule of ``qjm.reader.safe_journaled_ops``, shared with the polling read). Rounds remain the
fallback: one starts at once when a subscription ends for another reason than a roll, and
one runs every ``PUSH_POLL_PERIOD`` anyway.

The tailer reads through an ``EditSource`` (``hanamenode.journal``): for the QJM,
``QuorumEditSource`` over ``load_edits``, the one reading loop of the JournalNodes'
segments; the ZooKeeper journal is its own source (``zkjournal``, docs/architecture.md §9).
The transition to active reads the log up to the end that recovery found through
``catch_up``, from its new writer's journal, after stopping the tailer.

The tailer is a task on the NameNode's event loop (``edit-log-tailer-<nn>``, issue 12): it
sleeps, and runs each round's blocking reads (the reader QJM, the segment streams) and the
roll request on the loop's bridge executor (``NameNodeLoop.blocking``); the ops it reads are
applied on the loop in batches (``apply_many`` is ``FSNamesystem.apply_tailed``: one hop
into the loop per batch, ``BatchedApply``).

    tailer = EditLogTailer(namesystem.apply_tailed, lambda: namesystem.last_applied_txid,
                           edit_source_for(reader), tail_period=1.0, roll_period=120.0,
                           peers=peers, nn_loop=nn_loop)
    tailer.start()          # on the loop
    ...
    await tailer.stop()
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import Any

import structlog

from conf import clock
from hanamenode.journal import (
    ApplyTailed,
    EditSource,
    JournalManager,
    LoadResult,
    PushFeed,
)
from hanamenode.loop import NameNodeLoop
from hanamenode.metrics import NameNodeMetrics
from hanamenode.peers import NameNodePeers, Peer
from proto import edits_pb2, namenode_pb2
from proto.values import RemoteEditLog
from qjm.errors import describe_exception
from qjm.journal_manager import QuorumJournalManager
from qjm.reader import EditLogReadError, SegmentSource, chain_segments
from qjm.subscriber import EditSubscriber, subscription_targets

log = structlog.get_logger(__name__)

__all__ = [
    "ApplyTailed",
    "BatchedApply",
    "EditLogTailer",
    "EditsUnavailableError",
    "LoadResult",
    "QuorumEditSource",
    "check_edits_available",
    "edit_source_for",
    "load_edits",
]

ApplyMany = Callable[[list[edits_pb2.EditOp]], int]
"""Apply ops in order; how many were applied (fewer than given: stop, tailing was disabled)."""

APPLY_BATCH = 256
"""Ops the tailer hands to the loop at once: one hop into the loop per batch, not per op."""


class BatchedApply:
    """An ``ApplyTailed`` for ``load_edits`` that hands ops to ``apply_many`` in batches of
    ``size``; ``flush`` hands over the rest. ``applied`` and ``last_txid`` count what was
    really applied."""

    def __init__(self, apply_many: ApplyMany, size: int = APPLY_BATCH) -> None:
        self._apply_many = apply_many
        self._size = size
        self._pending: list[edits_pb2.EditOp] = []
        self.refused = False
        self.applied = 0
        self.last_txid = 0

    def __call__(self, op: edits_pb2.EditOp) -> bool:
        if self.refused:
            return False
        self._pending.append(op)
        return self.flush() if len(self._pending) >= self._size else True

    def flush(self) -> bool:
        """Apply what is pending; False once the namesystem refused an op."""
        ops, self._pending = self._pending, []
        if ops and not self.refused:
            done = self._apply_many(ops)
            if done:
                self.applied += done
                self.last_txid = ops[done - 1].txid
            self.refused = done < len(ops)
        return not self.refused

# Do not spin when the configured tail period is 0 ("as often as possible").
_MIN_PERIOD = 0.01

PUSH_POLL_PERIOD = 1.0
"""With pushed edits, how often a round runs anyway when no fallback was asked for: it
catches what no push brought (say a JournalNode majority of which one lags until the next
roll). Reasons to fall back (a cache miss, a dropped or broken stream) start one at once."""


def load_edits(
    qjm: QuorumJournalManager,
    since_txid: int,
    apply: ApplyTailed,
    *,
    up_to: int | None = None,
    should_stop: Callable[[], bool] = lambda: False,
    on_target: Callable[[int], None] | None = None,
) -> LoadResult:
    """Apply every op of the finalized segments from ``since_txid`` (through ``up_to``).

    Reads the manifests of a quorum of JournalNodes (in-progress segments included, only to
    learn how far the log goes; ``on_target`` is told that highest txid before any op is
    applied), chains the finalized segments without gaps, and streams each from any
    JournalNode that has it.
    """
    call = qjm.loggers.get_edit_log_manifest(since_txid, True)
    manifests = qjm.loggers.wait_for_write_quorum(
        call, qjm.timeouts.select_input_streams_timeout, f"getEditLogManifest({since_txid})"
    )
    highest = 0
    for logs, committed in manifests.values():
        highest = max([highest, committed, *(entry.end_txid for entry in logs)])
    if on_target is not None:
        on_target(highest)
    by_source: dict[SegmentSource, list[RemoteEditLog]] = {
        lg: logs for lg, (logs, _) in manifests.items()
    }
    applied = 0
    last = 0
    for stream in chain_segments(by_source, since_txid, cluster_size=len(qjm.loggers)):
        if up_to is not None and stream.start_txid > up_to:
            break
        for op in stream.read(max(stream.start_txid, since_txid)):
            if (up_to is not None and op.txid > up_to) or should_stop() or not apply(op):
                return LoadResult(applied, last, highest)
            applied += 1
            last = op.txid
    return LoadResult(applied, last, highest)


class EditsUnavailableError(Exception):
    """The journal does not hold every edit after an image."""


def check_edits_available(qjm: QuorumJournalManager, since_txid: int) -> None:
    """EditsUnavailableError unless the JournalNodes' segments (finalized or in progress, as
    a quorum reports them) chain without a gap from ``since_txid`` on."""
    call = qjm.loggers.get_edit_log_manifest(since_txid, True)
    manifests = qjm.loggers.wait_for_write_quorum(
        call, qjm.timeouts.select_input_streams_timeout, f"getEditLogManifest({since_txid})"
    )
    segments: list[RemoteEditLog] = sorted(
        (entry for logs, _ in manifests.values() for entry in logs),
        key=lambda e: (e.start_txid, e.end_txid),
    )
    next_txid = since_txid
    for entry in segments:
        if entry.end_txid < next_txid:
            continue
        if entry.start_txid > next_txid:
            raise EditsUnavailableError(
                f"the JournalNodes do not hold txids {next_txid}-{entry.start_txid - 1}, which "
                "the image does not cover (purged?): this NameNode could never catch up"
            )
        next_txid = entry.end_txid + 1


class _QuorumPushFeed:
    """The QJM's pushed edits (``EditSubscriber``: a SubscribeEdits stream per JournalNode)
    as a ``PushFeed``: ``decide`` applies the majority rule of ``PushedFeeds``."""

    def __init__(self, subscriber: EditSubscriber) -> None:
        self._subscriber = subscriber

    @property
    def subscribed(self) -> set[str]:
        return self._subscriber.subscribed

    def start(self) -> None:
        self._subscriber.start()

    async def stop(self) -> None:
        await self._subscriber.stop()

    def decide(self, next_txid: int) -> list[edits_pb2.EditOp]:
        return self._subscriber.feeds.decide(next_txid)


class QuorumEditSource:
    """The tailer's reads of a QJM journal: finalized segments through the manifests
    (``load_edits``), the open segment's edits a majority holds (``GetJournaledEdits``), and
    the SubscribeEdits pushes (docs/architecture.md §5.4)."""

    def __init__(self, qjm: QuorumJournalManager) -> None:
        self.qjm = qjm

    def load_edits(self, since_txid: int, apply: ApplyTailed, **options: Any) -> LoadResult:
        """``load_edits`` of this QJM (its keyword options)."""
        return load_edits(self.qjm, since_txid, apply, **options)

    def read_journaled_edits(self, since_txid: int, max_txns: int) -> list[edits_pb2.EditOp]:
        return self.qjm.read_journaled_edits(since_txid, max_txns)

    def push_feed(
        self,
        next_txid: Callable[[], int],
        on_push: Callable[[], None],
        on_ended: Callable[[str, str], None],
    ) -> PushFeed:
        return _QuorumPushFeed(
            EditSubscriber(
                subscription_targets(self.qjm.loggers.loggers, self.qjm.journal_id),
                next_txid,
                on_push,
                on_ended,
            )
        )

    def check_edits_available(self, since_txid: int) -> None:
        check_edits_available(self.qjm, since_txid)


def edit_source_for(journal: JournalManager) -> EditSource:
    """How the tailer reads ``journal``: a QJM through ``QuorumEditSource``; a journal that
    is its own edit source (the ZooKeeper journal) as it is."""
    if isinstance(journal, QuorumJournalManager):
        return QuorumEditSource(journal)
    if isinstance(journal, EditSource):
        return journal
    raise TypeError(f"{type(journal).__name__} is no edit source the tailer can read")


class EditLogTailer:
    """The standby's tailing task (``edit-log-tailer-<nn>``), with its roll requests.

    ``apply_many`` applies a batch of ops on the loop (the namesystem checks that it is still
    tailing, and stops at the first op it refuses); ``last_applied`` reads the namesystem's
    last applied txid.
    """

    def __init__(
        self,
        apply_many: ApplyMany,
        last_applied: Callable[[], int],
        source: EditSource,
        *,
        tail_period: float,
        roll_period: float,
        peers: NameNodePeers | None = None,
        metrics: NameNodeMetrics | None = None,
        nn_id: str = "",
        in_progress: bool = False,
        max_txns: int = 5000,
        nn_loop: NameNodeLoop,
        on_target: Callable[[int], None] | None = None,
        on_round: Callable[[LoadResult], None] | None = None,
        push: bool = False,
        asks_for_rolls: Callable[[], bool] | None = None,
    ) -> None:
        self._apply_many = apply_many
        self._asks_for_rolls = asks_for_rolls
        """Asked when a roll is due: False lets this one pass (an observer's, by default)."""
        self._on_target = on_target
        self._on_round = on_round
        """Told, from the round's bridge thread, how far the log goes once the manifests are
        read, and what each round that ran to its end applied (the startup progress)."""
        self.nn_loop = nn_loop
        self._last_applied = last_applied
        self.source = source
        self.tail_period = max(tail_period, _MIN_PERIOD)
        self.roll_period = roll_period
        self.peers = peers
        self.metrics = metrics
        self.nn_id = nn_id
        self.in_progress = in_progress
        """Also tail the in-progress segment (dfs.ha.tail-edits.in-progress)."""
        self.max_txns = max_txns
        self.push = push and in_progress
        """Apply the edits every JournalNode pushes (SubscribeEdits) as they come; rounds
        are the fallback (dfs.ha.tail-edits.push, with in-progress tailing)."""
        self._subscriber: PushFeed | None = None
        self._fallback = asyncio.Event()
        self.pushed_txns_applied = 0
        self._stop = threading.Event()
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._roll: asyncio.Future[int | None] | None = None
        """The roll request in flight (``trigger_active_log_roll`` on the bridge), if any."""
        self._log = log.bind(nn=nn_id)
        self.lag_txns = 0
        self.last_load_time = clock.monotonic()
        self.last_roll_request = clock.monotonic()
        self.last_exception: BaseException | None = None
        """What made the last round fail (None after a good round)."""

    # -- lifecycle -----------------------------------------------------------------------------

    async def _sleep(self, seconds: float) -> None:
        """Sleep, or less when ``stop`` is called (or, with pushes, a fallback is asked for)
        meanwhile."""
        if not self.push:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), seconds)
            return
        waits = {
            asyncio.ensure_future(self._stopping.wait()),
            asyncio.ensure_future(self._fallback.wait()),
        }
        try:
            await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()
        self._fallback.clear()

    def start(self) -> None:
        """Start the task (on the loop)."""
        if self._task is not None:
            return
        # A fresh event per run: a read that outlived its stop() (stuck in a bridge thread)
        # keeps seeing its own event set and cannot come back to life with the next start().
        stop = threading.Event()
        self._stop = stop
        self._stopping = asyncio.Event()
        self.last_roll_request = clock.monotonic()
        self._task = self.nn_loop.loop.create_task(
            self._run(stop), name=f"edit-log-tailer-{self.nn_id}"
        )
        if self.push:
            self._fallback = asyncio.Event()
            self._subscriber = self.source.push_feed(
                lambda: self._last_applied() + 1,
                self._apply_pushed,
                self._subscription_ended,
            )
            self._subscriber.start()
            if self.metrics is not None:
                self.metrics.edit_subscriptions.set_function(lambda: self.subscriptions)

    async def stop(self, timeout: float = 30.0) -> bool:
        """Stop the task; False if its read in flight did not end within ``timeout`` (it then
        stops at its next op: the namesystem refuses its applies once tailing is disabled)."""
        self._stop.set()
        self._stopping.set()  # wakes the task's sleep at once
        roll, self._roll = self._roll, None
        if roll is not None and not roll.done():
            # Not waited for: its bridge thread ends the RPC at its own deadline, and
            # trigger_active_log_roll logs a failure itself.
            roll.cancel()
            self._log.info("left a roll request to the previous active in flight")
        subscriber, self._subscriber = self._subscriber, None
        if subscriber is not None:
            await subscriber.stop()
        task, self._task = self._task, None
        if task is None:
            return True
        done, _ = await asyncio.wait({task}, timeout=timeout)
        if not done:
            task.cancel()
            self._log.warning("tailer did not stop in time", timeout=timeout)
            return False
        return True

    @property
    def running(self) -> bool:
        return self._task is not None

    def seconds_since_last_load(self) -> float:
        return clock.monotonic() - self.last_load_time

    async def _run(self, stop: threading.Event) -> None:
        self._log.info(
            "edit log tailer started", tail_period=self.tail_period, roll_period=self.roll_period
        )
        blocking = self.nn_loop.blocking
        if self.push:
            self._fallback.set()  # catch up from the finalized segments first
        period = max(self.tail_period, PUSH_POLL_PERIOD) if self.push else self.tail_period
        while not stop.is_set():
            await self._sleep(period)
            if stop.is_set():
                break
            try:
                await blocking(self.do_tail_edits, stop)
            except Exception as exc:
                self.last_exception = exc
                if self.metrics is not None:
                    self.metrics.tail_errors.inc()
                self._log.warning("tailing edits failed", error=describe_exception(exc))
            if (
                not stop.is_set()
                and (self._roll is None or self._roll.done())
                and clock.monotonic() - self.last_roll_request >= self.roll_period
                and (self._asks_for_rolls is None or self._asks_for_rolls())
            ):
                # Off the tailer's path (issue 25 item 4): a roll asked of an active that
                # hangs (frozen, partitioned) takes up to the peers' RPC deadline, and the
                # transition to active waits for this task to stop, not for the roll.
                self.last_roll_request = clock.monotonic()
                self._roll = asyncio.ensure_future(blocking(self.trigger_active_log_roll))
        self._log.info("edit log tailer stopped")

    # -- pushed edits (on the loop) -------------------------------------------------------------

    @property
    def subscriptions(self) -> int:
        """JournalNodes whose edits are pushed to this tailer now."""
        return len(self._subscriber.subscribed) if self._subscriber is not None else 0

    def _apply_pushed(self) -> None:
        """After a push: apply what a majority of JournalNodes pushed in one writer epoch."""
        subscriber = self._subscriber
        if subscriber is None or self._stop.is_set():
            return
        try:
            ops = subscriber.decide(self._last_applied() + 1)
        except EditLogReadError as exc:
            self._log.warning("pushed edits refused", error=str(exc))
            self._fall_back("bad_push")
            return
        if not ops:
            return
        done = self._apply_many(ops)
        self.pushed_txns_applied += done
        if self.metrics is not None:
            self.metrics.pushed_txns_applied.inc(done)
        self._after_load(LoadResult(done, ops[done - 1].txid if done else 0, ops[-1].txid))

    def apply_held(self) -> None:
        """Apply the pushed ops held while the namespace was frozen (a checkpoint read it),
        on the loop, without waiting for the next push."""
        if self.push:
            self._apply_pushed()

    def _subscription_ended(self, address: str, reason: str) -> None:
        if reason != "segment_finalized":
            self._fall_back(reason)

    def _fall_back(self, reason: str) -> None:
        """Run a round (finalized segments, then GetJournaledEdits) now."""
        if self.metrics is not None:
            self.metrics.push_fallbacks.labels(reason).inc()
        self._fallback.set()

    # -- tailing -------------------------------------------------------------------------------

    def do_tail_edits(self, stop: threading.Event | None = None) -> int:
        """One round (blocking: a bridge thread runs it): apply whatever finalized edits are
        new, then (with in-progress tailing) the edits of the open segment that a majority of
        JournalNodes hold; return how many."""
        since = self._last_applied() + 1
        should_stop = stop.is_set if stop is not None else (lambda: False)
        batched = BatchedApply(self._apply_many)
        read = self.source.load_edits(
            since, batched, should_stop=should_stop, on_target=self._on_target
        )
        batched.flush()
        result = LoadResult(batched.applied, batched.last_txid, read.highest_known_txid)
        if self.in_progress and not should_stop() and not batched.refused:
            result = self._tail_in_progress(result, should_stop)
        self._after_load(result)
        if self._on_round is not None and not should_stop() and not batched.refused:
            self._on_round(result)
        return result.applied

    def _tail_in_progress(
        self, finalized: LoadResult, should_stop: Callable[[], bool]
    ) -> LoadResult:
        applied, last = finalized.applied, finalized.last_txid
        ops = self.source.read_journaled_edits(self._last_applied() + 1, self.max_txns)
        if ops and not should_stop():
            done = self._apply_many(ops)
            if done:
                applied += done
                last = ops[done - 1].txid
        return LoadResult(applied, last, max(finalized.highest_known_txid, last))

    def catch_up(self, journal: JournalManager, up_to: int | None, apply: ApplyTailed) -> int:
        """Apply everything through ``up_to`` from ``journal`` (the transition to active reads
        its new writer's journal, after recovery finalized the last segment); return how
        many ops were applied."""
        if up_to is None or up_to <= self._last_applied():
            return 0
        source = edit_source_for(journal)
        result = source.load_edits(self._last_applied() + 1, apply, up_to=up_to)
        self._after_load(result)
        self._log.info(
            "caught up with the recovered log", applied=result.applied, up_to=up_to
        )
        return result.applied

    def _after_load(self, result: LoadResult) -> None:
        last_applied = self._last_applied()
        self.lag_txns = max(0, result.highest_known_txid - last_applied)
        self.last_exception = None
        self.last_load_time = clock.monotonic()
        if result.applied:
            if self.metrics is not None:
                self.metrics.tailed_txns.inc(result.applied)
            self._log.debug("applied edits", count=result.applied, last_applied=last_applied)

    # -- rolls ---------------------------------------------------------------------------------

    def trigger_active_log_roll(self) -> int | None:
        """Ask the active to roll its edit log; the new segment's first txid, or None."""
        self.last_roll_request = clock.monotonic()
        if self.peers is None or not self.peers.peers:
            return None
        peers = self.peers

        def roll(peer: Peer) -> int:
            reply = peers.namenode(peer).RollEditLog(namenode_pb2.HAEmpty(), timeout=peers.timeout)
            return int(reply.segment_txid)

        try:
            segment = peers.call_active("roll edit log", roll)
        except Exception as exc:
            if self.metrics is not None:
                self.metrics.roll_requests.labels("failed").inc()
            self._log.warning("could not ask the active to roll its log", error=str(exc))
            return None
        if self.metrics is not None:
            self.metrics.roll_requests.labels("ok").inc()
        self._log.debug("active rolled its log", segment=segment)
        return segment

"""QuorumJournalManager and QuorumOutputStream (HDFS-3077 §2.2-§2.11, §5.2).

The writer's side of the protocol: fence earlier writers with a new unique epoch, recover the
last unfinalized segment by Paxos (prepareRecovery, choose a source, acceptRecovery, finalize),
then start segments, write batches to every JournalNode and count a batch written when a
quorum acknowledges it. The decisions are pure functions in ``qjm.recovery``, ``qjm.epochs``
and ``qjm.quorum``; this module sequences them over an ``AsyncLoggerSet``.

The sequencing is written once, as coroutines on the writer's event loop (issue 12): the
awaitable API, for a caller on an event loop, is the ``a``-prefixed methods::

    qjm = QuorumJournalManager.connect(["127.0.0.1:8485", ...], "ns1", ns_info, settings.qjm)
    recovered_end = await qjm.arecover_unfinalized_segments()   # fences and recovers
    out = await qjm.astart_log_segment((recovered_end or 0) + 1)
    out.write(op); await out.aflush()                          # acknowledged by a quorum
    await qjm.afinalize_log_segment(out.segment_txid, out.last_txid)

The first awaited call binds the manager (and its loggers' tasks) to the running loop. The
blocking methods of the same names without the ``a`` (``recover_unfinalized_segments()``,
``out.flush()``, ...) keep their signatures for code that must block (tools, ``format``,
threads, tests): each runs its coroutine through ``qjm.bridge.run_blocking``, on the loop the
manager is bound to, or on the shared ``qjm-loop`` thread when it is bound to none yet.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from concurrent.futures import Future
from typing import Any, TypeVar

import structlog

from conf import TLSSettings, clock
from conf.mutants import Mutant, active
from journalnode.errors import EpochError, JournalUnavailableError
from proto import edits_pb2, records
from proto.values import NamespaceInfo, RemoteEditLog
from qjm.async_logger import AsyncLogger, AsyncLoggerSet
from qjm.bridge import on_loop_thread, run_blocking, shared_loop
from qjm.channel import AioJournalChannel
from qjm.epochs import next_epoch
from qjm.errors import (
    QJMError,
    QuorumException,
    QuorumTimeout,
    RecoveryError,
    describe_exception,
)
from qjm.fencing import FenceLatch
from qjm.metrics import QUORUM_SYNC_SECONDS, READ_INDEX_ROUND_SECONDS, READ_INDEX_ROUNDS
from qjm.quorum import QuorumCall
from qjm.read_index import ReadIndex
from qjm.reader import (
    RedundantEditLogInputStream,
    SegmentSource,
    chain_segments,
    safe_journaled_ops,
)
from qjm.recovery import RecoveryCandidate, RecoveryPlan, plan_recovery

LATE_MANIFEST_WAIT = 2.0
"""How long a reader waits for the JournalNodes beyond the first quorum when the quorum's
manifests leave a finalized segment without a majority md5 (docs/protocol.md §8.7)."""
log = structlog.get_logger(__name__)

T = TypeVar("T")

FORMAT_RETRY_SECONDS = 0.2
"""How often ``is_formatted`` and ``format`` ask an unreachable JournalNode again, until
``format_timeout``."""


class _DefaultTimeouts:
    """Hadoop's defaults, in seconds, for callers without a configuration."""

    start_segment_timeout = 20.0
    prepare_recovery_timeout = 120.0
    accept_recovery_timeout = 120.0
    finalize_segment_timeout = 120.0
    select_input_streams_timeout = 20.0
    get_journal_state_timeout = 120.0
    new_epoch_timeout = 120.0
    write_txns_timeout = 20.0
    format_timeout = 60.0
    heartbeat_interval = 1.0
    queued_edits_limit_bytes = 10 * 1024 * 1024


class QuorumJournalManager:
    """The writer (and reader) of one journal on a set of JournalNodes."""

    def __init__(
        self,
        loggers: AsyncLoggerSet,
        journal_id: str,
        namespace_info: NamespaceInfo,
        timeouts: Any = None,
    ) -> None:
        self.loggers = loggers
        self.journal_id = journal_id
        self.namespace_info = namespace_info
        self.timeouts = timeouts or _DefaultTimeouts()
        self.epoch = 0
        self.committed_txid = 0
        self._log = log.bind(journal=journal_id)
        self._heartbeat_task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._fence = FenceLatch(self._log)
        self._read_index = ReadIndex(self._confirm_round)
        for lg in loggers.loggers:
            lg.on_epoch_error = self._on_epoch_error

    @classmethod
    def connect(
        cls,
        addresses: Sequence[str],
        journal_id: str,
        namespace_info: NamespaceInfo,
        timeouts: Any = None,
        *,
        tls: TLSSettings | None = None,
        names: Mapping[str, str] | None = None,
    ) -> QuorumJournalManager:
        """A manager over gRPC channels to ``addresses`` (host:port each); ``names`` gives
        the configured id of an address (``jn1``), for pages and metric labels."""
        timeouts = timeouts or _DefaultTimeouts()
        loggers = AsyncLoggerSet(
            AsyncLogger(
                AioJournalChannel(address, tls),
                journal_id,
                namespace_info,
                queue_limit_bytes=int(getattr(timeouts, "queued_edits_limit_bytes", 10 << 20)),
                timeouts=timeouts,
                node_id=(names or {}).get(address, ""),
            )
            for address in addresses
        )
        return cls(loggers, journal_id, namespace_info, timeouts)

    # ------------------------------------------------------------------ the loop and the bridge

    def _bind_running(self) -> None:
        """Bind to the running loop (the first awaited call does it); refuse another."""
        if self.loggers.direct:
            return
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self.loggers.bind(loop)
            self._loop = loop
        elif self._loop is not loop:
            raise QJMError(
                f"QJM of journal {self.journal_id!r} is bound to another event loop; use its "
                "blocking methods from other threads"
            )

    def _blocking_loop(self) -> asyncio.AbstractEventLoop | None:
        """Where blocking calls run: None for direct loggers (inline), else the bound loop,
        or the shared ``qjm-loop`` thread's when none is bound yet."""
        if self.loggers.direct:
            return None
        if self._loop is None:
            loop = shared_loop()
            self.loggers.bind(loop)
            self._loop = loop
        return self._loop

    def _block(self, coro: Coroutine[Any, Any, T]) -> T:
        """The blocking API: ``coro`` through the bridge (``qjm.bridge``)."""
        return run_blocking(coro, self._blocking_loop())

    def run_on_loop(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` (which awaits this manager's async methods) on the manager's event loop
        and block until it ends: for benchmarks and tests that drive the awaitable API from
        a thread. The same bridge as every blocking method."""
        return self._block(coro)

    async def aclose(self) -> None:
        self._stop_heartbeat_task()
        await self.loggers.aclose()

    def close(self) -> None:
        self.stop_heartbeats()
        loop = self._loop
        if loop is None or loop.is_closed() or self.loggers.direct:
            self.loggers.close()
        elif on_loop_thread(loop):
            loop.create_task(self.loggers.aclose())
        else:
            asyncio.run_coroutine_threadsafe(self.loggers.aclose(), loop).result(10)

    def __enter__(self) -> QuorumJournalManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def _wait(self, call: Any, timeout: float, name: str) -> dict[AsyncLogger, Any]:
        return await self.loggers.await_write_quorum(call, timeout, name)

    # ------------------------------------------------------------------ format (HDFS-3077 §4.2)

    def format(self, *, force: bool = False) -> None:
        """Format the journal on every JournalNode: all must succeed, not just a quorum."""
        self._block(self.aformat(force=force))

    async def aformat(self, *, force: bool = False) -> None:
        """``format`` on the loop. A JournalNode that cannot be reached is asked again, as
        by ``ais_formatted``: formatting an empty journal twice is harmless (a second
        Format of one with nothing in it writes the same VERSION), so a request that may have
        arrived before its connection failed can be sent again."""
        self._bind_running()
        ns = self.namespace_info
        await self._ask_every_journalnode(
            lambda lg: lg.format(ns, force),
            "format",
            f"format journal {self.journal_id!r}",
        )

    def is_formatted(self) -> dict[str, bool]:
        """Which JournalNodes hold a formatted journal (needs every JournalNode to answer)."""
        return self._block(self.ais_formatted())

    async def ais_formatted(self) -> dict[str, bool]:
        """``is_formatted`` on the loop (needs every JournalNode's answer, with the retries of
        ``_ask_every_journalnode``)."""
        self._bind_running()
        answers = await self._ask_every_journalnode(
            lambda lg: lg.is_formatted(),
            "isFormatted",
            f"ask whether journal {self.journal_id!r} is formatted",
        )
        return {lg.address: formatted for lg, (formatted, _) in answers.items()}

    async def _ask_every_journalnode(
        self, ask: Callable[[AsyncLogger], Future[T]], operation: str, what: str
    ) -> dict[AsyncLogger, T]:
        """Every JournalNode's answer to ``ask`` (formatting needs all of them, not a
        quorum). One that cannot be reached (starting, or a connection that failed) is asked
        again every ``FORMAT_RETRY_SECONDS`` until ``format_timeout``, because a blip is no
        answer; any other error, or the deadline, raises QuorumException naming each
        JournalNode's ("could not <what> on every JournalNode")."""
        deadline = clock.monotonic() + self.timeouts.format_timeout
        answers: dict[AsyncLogger, T] = {}
        todo = list(self.loggers.loggers)
        logged: set[AsyncLogger] = set()
        while True:
            call = QuorumCall({lg: ask(lg) for lg in todo})
            await call.await_for(
                len(todo),
                len(todo),
                -1,
                max(0.0, deadline - clock.monotonic()),
                operation_name=operation,
            )
            answers.update(call.successes())
            failed = call.exceptions()
            if not failed:
                return answers
            unreachable = all(isinstance(e, JournalUnavailableError) for e in failed.values())
            if self.loggers.direct or not unreachable or (
                clock.monotonic() + FORMAT_RETRY_SECONDS >= deadline
            ):
                raise QuorumException(
                    f"could not {what} on every JournalNode", answers, failed
                )
            if set(failed) != logged:  # once per set of unreachable JournalNodes
                logged = set(failed)
                self._log.warning(
                    "JournalNode unreachable; asking again",
                    operation=operation,
                    journalnodes=sorted(lg.address for lg in failed),
                    error=describe_exception(next(iter(failed.values()))),
                    until_seconds=round(deadline - clock.monotonic(), 1),
                )
            todo = list(failed)
            await asyncio.sleep(FORMAT_RETRY_SECONDS)

    # ------------------------------------------------------------------ epochs (HDFS-3077 §2.5)

    def create_new_unique_epoch(self) -> dict[AsyncLogger, int | None]:
        """getJournalState on a quorum, propose max+1, newEpoch on a quorum.

        Returns each accepting logger's newest segment txid. Raises QuorumException when no
        quorum promises (another writer proposed the same or a higher epoch meanwhile).
        """
        return self._block(self.acreate_new_unique_epoch())

    async def acreate_new_unique_epoch(self) -> dict[AsyncLogger, int | None]:
        self._bind_running()
        states = await self._wait(
            self.loggers.get_journal_state(),
            self.timeouts.get_journal_state_timeout,
            "getJournalState()",
        )
        proposed = next_epoch(epoch for epoch, _ in states.values())
        responses = await self._wait(
            self.loggers.new_epoch(proposed),
            self.timeouts.new_epoch_timeout,
            f"newEpoch({proposed})",
        )
        self.loggers.set_epoch(proposed)
        self.epoch = proposed
        self._log.info(
            "started new epoch", epoch=proposed, promised_by=sorted(lg.address for lg in responses)
        )
        return responses

    # ------------------------------------------------------------------ recovery (HDFS-3077 §2.8)

    def recover_unfinalized_segments(self) -> int | None:
        """Fence earlier writers and finalize the newest segment on a quorum.

        Returns the last txid of the recovered log (None for an empty journal): the next
        segment starts right after it.
        """
        return self._block(self.arecover_unfinalized_segments())

    async def arecover_unfinalized_segments(self) -> int | None:
        self._bind_running()
        responses = await self.acreate_new_unique_epoch()
        newest = [txid for txid in responses.values() if txid is not None]
        if not newest:
            self._log.info("no segments to recover")
            return None
        segment_txid = max(newest)
        plan = await self.arecover_unclosed_segment(segment_txid)
        if plan is None:
            # Every responder moved an empty segment aside: the log ends before it.
            return segment_txid - 1
        return plan.end_txid

    def recover_unclosed_segment(self, segment_txid: int) -> RecoveryPlan | None:
        return self._block(self.arecover_unclosed_segment(segment_txid))

    async def arecover_unclosed_segment(self, segment_txid: int) -> RecoveryPlan | None:
        self._bind_running()
        prepared = await self._wait(
            self.loggers.prepare_recovery(segment_txid),
            self.timeouts.prepare_recovery_timeout,
            f"prepareRecovery({segment_txid})",
        )
        by_address = {lg.address: lg for lg in prepared}
        candidates = [RecoveryCandidate(lg.address, response) for lg, response in prepared.items()]
        for c in candidates:
            self._log.info(
                "prepareRecovery answer",
                segment=segment_txid,
                journalnode=c.logger,
                state=str(c.response.segment_state),
                accepted_in_epoch=c.response.accepted_in_epoch,
                last_writer_epoch=c.response.last_writer_epoch,
            )
        plan = plan_recovery(segment_txid, candidates, committed_txid=self.committed_txid)
        if plan is None:
            self._log.info("no responder holds a segment to recover", segment=segment_txid)
            return None
        source = by_address[plan.source]
        from_url = source.from_url or source.address
        self._log.info(
            "recovering segment",
            segment=segment_txid,
            source=plan.source,
            chosen=str(plan.segment_state),
        )
        await self._wait(
            self.loggers.accept_recovery(plan.segment_state, from_url),
            self.timeouts.accept_recovery_timeout,
            f"acceptRecovery({plan.segment_state})",
        )
        # Finalize everywhere, as Hadoop does, but with the accepted segment's md5: a logger
        # that missed acceptRecovery may hold another writer's copy of the same length, and
        # it must refuse to finalize that (``python -m qjm.sim --unique-first-txn`` found it:
        # a writer's first batch on jn0 only, the next writer's on jn1 only, a recovery from
        # jn1 whose acceptRecovery failed on jn0). A logger whose acceptRecovery arrives late
        # still finalizes: its calls run in order, so the accept lands before the finalize.
        await self._wait(
            self.loggers.finalize_log_segment(segment_txid, plan.end_txid, plan.segment_state.md5),
            self.timeouts.finalize_segment_timeout,
            f"finalizeLogSegment({segment_txid}-{plan.end_txid})",
        )
        self._set_committed(plan.end_txid)
        return plan

    # ------------------------------------------------------------------ writing

    def start_log_segment(self, txid: int) -> QuorumOutputStream:
        return self._block(self.astart_log_segment(txid))

    async def astart_log_segment(self, txid: int) -> QuorumOutputStream:
        self._bind_running()
        if self.epoch == 0:
            raise QJMError("start_log_segment before recover_unfinalized_segments (no epoch)")
        await self._wait(
            self.loggers.start_log_segment(txid),
            self.timeouts.start_segment_timeout,
            f"startLogSegment({txid})",
        )
        return QuorumOutputStream(self, txid)

    def finalize_log_segment(self, start: int, end: int) -> None:
        self._block(self.afinalize_log_segment(start, end))

    async def afinalize_log_segment(self, start: int, end: int) -> None:
        self._bind_running()
        await self._wait(
            self.loggers.finalize_log_segment(start, end),
            self.timeouts.finalize_segment_timeout,
            f"finalizeLogSegment({start}-{end})",
        )

    def purge_logs_older_than(self, min_txid_to_keep: int) -> None:
        self._block(self.apurge_logs_older_than(min_txid_to_keep))

    async def apurge_logs_older_than(self, min_txid_to_keep: int) -> None:
        # Best effort like HDFS: a JN that misses it purges at a later call.
        self._bind_running()
        call = self.loggers.purge_logs(min_txid_to_keep)
        await call.await_for(
            len(self.loggers),
            0,
            -1,
            self.timeouts.finalize_segment_timeout,
            operation_name=f"purgeLogs({min_txid_to_keep})",
        )
        for lg, exc in call.exceptions().items():
            self._log.warning(
                "purge failed on a JournalNode", journalnode=lg.address, error=str(exc)
            )

    def _set_committed(self, txid: int) -> None:
        if txid > self.committed_txid:
            self.committed_txid = txid
            self.loggers.set_committed_txid(txid)

    async def asend_edits(self, segment_txid: int, first: int, count: int, framed: bytes) -> None:
        """Send one batch of framed records (txids ``first`` on) to every JournalNode and
        return once a quorum acknowledged it; the committed txid then moves to its end.
        ``QuorumOutputStream.aflush`` is the usual way in."""
        self._bind_running()
        started = time.perf_counter()
        last = first + count - 1
        call = self.loggers.send_edits(segment_txid, first, count, framed)
        if active(Mutant.ACK_FROM_ONE):
            n = len(self.loggers)
            await call.await_for(
                n, 1, n - 1, self.timeouts.write_txns_timeout, operation_name="send"
            )
            if not call.successes():
                call.rethrow_exception(f"sendEdits({first}-{last}) failed everywhere")
        else:
            await self._wait(call, self.timeouts.write_txns_timeout, f"sendEdits({first}-{last})")
        QUORUM_SYNC_SECONDS.labels(self.journal_id).observe(time.perf_counter() - started)
        self._set_committed(last)
        for lg in self.loggers.loggers:
            lg.update_lag(last)

    # ------------------------------------------------------------------ fencing (issue 11)

    @property
    def fenced(self) -> str | None:
        """Why this writer is fenced (a JournalNode promised a newer epoch), or None."""
        return self._fence.reason

    @property
    def _fenced(self) -> str | None:
        return self._fence.reason

    def add_fence_listener(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(reason)`` once, from any thread, when this writer learns that a
        newer epoch was promised (at once if it already has)."""
        self._fence.add_listener(listener)

    def _on_epoch_error(self, lg: AsyncLogger, call: str, exc: EpochError) -> None:
        """A JournalNode refused a call stamped with our epoch: a newer writer has been
        promised there. Whichever call told us (a heartbeat, a write, a finalize), this
        writer must stop, as when a sync fails; one refusal is enough, since a JournalNode
        never promises an epoch back down."""
        if self.epoch == 0:
            return
        if call == "heartbeat" and active(Mutant.FENCED_HEARTBEAT_REFUSAL_IGNORED):
            return
        reason = f"{lg.address} refused {call} in epoch {self.epoch}: {describe_exception(exc)}"
        self._fence.fence(reason, "writer fenced: a newer epoch was promised")

    def confirm_epoch(self, timeout: float | None = None) -> None:
        """Return once a majority of JournalNodes answered, after this call began, that they
        have promised no epoch above ours (a read-index round, shared by every caller waiting
        at that moment: ``qjm.read_index``). Raises QuorumException otherwise; a JournalNode
        that promised a higher epoch also fences this writer."""
        self._check_may_confirm()
        limit = self.timeouts.write_txns_timeout if timeout is None else timeout
        self._read_index.confirm(limit + 5.0)

    def _check_may_confirm(self) -> None:
        if self.epoch == 0:
            raise QJMError("confirm_epoch before this writer took an epoch")
        if self._fenced is not None:
            raise QJMError(f"this writer is fenced: {self._fenced}")

    async def aconfirm_epoch(self) -> None:
        """One read-index round, awaited: its own quorum call (``GetJournalState`` to every
        JournalNode, which carries no IPC serial), sent at once beside each logger's queue, so
        it never waits behind the edits queued for a slow JournalNode. Returns when a majority
        answered with a promise at most our epoch; QuorumException otherwise (an answer above
        our epoch also fences this writer). Callers on a loop share rounds themselves;
        ``confirm_epoch`` shares them among threads."""
        self._bind_running()
        self._check_may_confirm()
        started = time.perf_counter()
        outcome = "failed"
        try:
            await self._wait(
                self.loggers.confirm_epoch(), self.timeouts.write_txns_timeout, "confirmEpoch()"
            )
            if self._fenced is not None:
                raise QJMError(f"this writer is fenced: {self._fenced}")
            outcome = "confirmed"
        finally:
            READ_INDEX_ROUNDS.labels(self.journal_id, outcome).inc()
            READ_INDEX_ROUND_SECONDS.labels(self.journal_id).observe(
                time.perf_counter() - started
            )

    def _confirm_round(self) -> None:
        self._block(self.aconfirm_epoch())

    @property
    def read_index_rounds(self) -> int:
        return self._read_index.rounds

    # ------------------------------------------------------------------ heartbeats

    def heartbeat_idle_loggers(self, idle_for: float | None = None) -> None:
        """Send a heartbeat to every logger that sent nothing for ``idle_for`` seconds, so idle
        JournalNodes learn the epoch (and fence older writers) and the committed txid."""
        if self.epoch == 0:
            return
        idle_for = self.timeouts.heartbeat_interval if idle_for is None else idle_for
        now = clock.monotonic()
        for lg in self.loggers.loggers:
            if now - lg.last_call_time >= idle_for:
                lg.heartbeat().add_done_callback(self._log_heartbeat_failure(lg))

    def _log_heartbeat_failure(self, lg: AsyncLogger) -> Callable[[Future[None]], None]:
        def done(future: Future[None]) -> None:
            exc = future.exception()
            if exc is not None:
                self._log.warning("heartbeat failed", journalnode=lg.address, error=str(exc))

        return done

    def start_heartbeats(self) -> None:
        """Heartbeat idle loggers every ``heartbeat_interval``: a task on the manager's loop
        (from a thread, it is started there; the simulator's direct loggers get none)."""
        loop = self._loop if self._loop is not None else self._blocking_loop()
        if loop is None:
            return
        if on_loop_thread(loop):
            self._start_heartbeat_task()
        else:
            asyncio.run_coroutine_threadsafe(self._astart_heartbeats(), loop).result(10)

    async def _astart_heartbeats(self) -> None:
        self._start_heartbeat_task()

    def _start_heartbeat_task(self) -> None:
        if self._heartbeat_task is not None:
            return
        interval = self.timeouts.heartbeat_interval

        async def beat() -> None:
            while True:
                await asyncio.sleep(interval)
                self.heartbeat_idle_loggers()

        self._heartbeat_task = asyncio.get_running_loop().create_task(
            beat(), name=f"qjm-heartbeat-{self.journal_id}"
        )

    def _stop_heartbeat_task(self) -> None:
        task, self._heartbeat_task = self._heartbeat_task, None
        if task is not None:
            task.cancel()

    def stop_heartbeats(self) -> None:
        loop = self._loop
        if self._heartbeat_task is None or loop is None or loop.is_closed():
            self._heartbeat_task = None
            return
        if on_loop_thread(loop):
            self._stop_heartbeat_task()
        else:
            with contextlib.suppress(TimeoutError):
                asyncio.run_coroutine_threadsafe(self._astop_heartbeats(), loop).result(5)

    async def _astop_heartbeats(self) -> None:
        self._stop_heartbeat_task()

    # ------------------------------------------------------------------ reading (HDFS-3077 §3)

    def select_input_streams(self, since_txid: int) -> list[RedundantEditLogInputStream]:
        """Finalized segments from since_txid on, each readable from every JN that has it."""
        return self._block(self.aselect_input_streams(since_txid))

    async def aselect_input_streams(self, since_txid: int) -> list[RedundantEditLogInputStream]:
        """``select_input_streams`` awaited; the streams it returns read segments with
        blocking iteration (read them in a thread, e.g. ``asyncio.to_thread``)."""
        self._bind_running()
        call = self.loggers.get_edit_log_manifest(since_txid, False)
        manifests = await self._wait(
            call, self.timeouts.select_input_streams_timeout, f"getEditLogManifest({since_txid})"
        )
        by_logger: dict[SegmentSource, list[RemoteEditLog]] = {
            lg: logs for lg, (logs, _) in manifests.items()
        }
        everyone = len(self.loggers)
        chain = chain_segments(by_logger, since_txid, cluster_size=everyone)
        if len(by_logger) < everyone and any(stream.refused for stream in chain):
            # The quorum that answered first holds no majority for some finalized segment
            # (docs/protocol.md §8.7); the slower JournalNodes' manifests may: wait for them
            # a little, then decide on every answer.
            try:
                await call.await_for(
                    everyone, everyone, everyone, LATE_MANIFEST_WAIT,
                    operation_name=f"getEditLogManifest({since_txid}) from every JournalNode",
                )
            except QuorumTimeout:
                log.info("not every JournalNode listed its segments in time",
                         journal=self.journal_id, waited=LATE_MANIFEST_WAIT)
            by_logger = {lg: logs for lg, (logs, _) in call.successes().items()}
            chain = chain_segments(by_logger, since_txid, cluster_size=everyone)
        return chain


    def read_journaled_edits(self, since_txid: int, max_txns: int) -> list[edits_pb2.EditOp]:
        """Edits from ``since_txid`` on that a majority of JournalNodes hold in one writer
        epoch, out of their caches of recent edits (the in-progress segment included); empty
        when none are, or when the caches no longer reach back to ``since_txid``."""
        return self._block(self.aread_journaled_edits(since_txid, max_txns))

    async def aread_journaled_edits(
        self, since_txid: int, max_txns: int
    ) -> list[edits_pb2.EditOp]:
        self._bind_running()
        call = self.loggers.get_journaled_edits(since_txid, max_txns)
        responses = await self._wait(
            call, self.timeouts.select_input_streams_timeout, f"getJournaledEdits({since_txid})"
        )
        return safe_journaled_ops(
            responses,
            cluster_size=len(self.loggers),
            since_txid=since_txid,
            what=lambda source: f"getJournaledEdits({since_txid}) from {source.address}",
        )


class QuorumOutputStream:
    """Writes one segment to a quorum, with a double buffer (HDFS-3077 §2.11).

    ``write`` appends to the current buffer; ``set_ready_to_flush`` swaps it with the (empty)
    ready buffer; ``flush_ready`` sends the ready buffer and waits for a quorum. A caller that
    does group commit (FSEditLog) keeps writing into the current buffer while a flush is in
    flight; ``flush`` does both steps for callers that don't.
    """

    def __init__(self, qjm: QuorumJournalManager, segment_txid: int) -> None:
        self.qjm = qjm
        self.segment_txid = segment_txid
        self._lock = threading.Lock()
        self._current = bytearray()
        self._current_first = segment_txid
        self._current_count = 0
        self._ready = b""
        self._ready_first = 0
        self._ready_count = 0
        self.last_txid = segment_txid - 1  # highest txid acknowledged by a quorum
        self._next_txid = segment_txid
        self.aborted = False

    def write(self, op: edits_pb2.EditOp) -> None:
        self.write_framed(op.txid, records.frame(op.SerializeToString()))

    def write_framed(self, txid: int, framed: bytes) -> None:
        with self._lock:
            if txid != self._next_txid:
                raise QJMError(f"txid {txid} written where {self._next_txid} was next")
            if self._current_count == 0:
                self._current_first = txid
            self._current += framed
            self._current_count += 1
            self._next_txid = txid + 1

    def set_ready_to_flush(self) -> None:
        with self._lock:
            if self._ready_count:
                raise QJMError("previous batch not flushed yet")
            self._ready = bytes(self._current)
            self._ready_first, self._ready_count = self._current_first, self._current_count
            self._current = bytearray()
            self._current_count = 0

    def flush_ready(self) -> None:
        """Send the ready buffer and block until a quorum acknowledged it."""
        self.qjm._block(self.aflush_ready())

    async def aflush_ready(self) -> None:
        """Send the ready buffer; return once a quorum acknowledged it."""
        if self.aborted:
            raise QJMError(f"output stream of segment {self.segment_txid} was aborted")
        if not self._ready_count:
            return
        try:
            await self.qjm.asend_edits(
                self.segment_txid, self._ready_first, self._ready_count, self._ready
            )
        except QuorumException:
            self.aborted = True
            raise
        self.last_txid = self._ready_first + self._ready_count - 1
        self._ready, self._ready_count = b"", 0

    def take_written(self) -> tuple[int, int, bytes]:
        """What was written since the last take, as one batch ``(first, count, framed)``,
        leaving the buffer empty: for a caller that keeps several batches in flight
        (``asend_batch``) instead of the one ready buffer."""
        with self._lock:
            batch = (self._current_first, self._current_count, bytes(self._current))
            self._current = bytearray()
            self._current_count = 0
        return batch

    async def asend_batch(self, first: int, count: int, framed: bytes) -> None:
        """Send one batch taken with ``take_written``; return once a quorum acknowledged it.
        Batches may be in flight together: each JournalNode writes a stream's batches in
        order, so a quorum for one is a quorum for every batch before it."""
        if self.aborted:
            raise QJMError(f"output stream of segment {self.segment_txid} was aborted")
        if not count:
            return
        try:
            await self.qjm.asend_edits(self.segment_txid, first, count, framed)
        except QuorumException:
            self.aborted = True
            raise
        self.last_txid = max(self.last_txid, first + count - 1)

    def flush(self) -> None:
        self.set_ready_to_flush()
        self.flush_ready()

    async def aflush(self) -> None:
        """Everything written so far, acknowledged by a quorum (the sync of the edit log)."""
        self.set_ready_to_flush()
        await self.aflush_ready()

    @property
    def pending_txns(self) -> int:
        return self._current_count


def connect_from_settings(settings: Any, namespace_info: NamespaceInfo) -> QuorumJournalManager:
    """A QuorumJournalManager for ``dfs.namenode.shared.edits.dir`` of the configuration."""
    uri = settings.journal_uri
    if uri is None:
        raise QJMError(
            "dfs.namenode.shared.edits.dir is not set (qjournal://h1:p;h2:p;h3:p/journal-id)"
        )
    return QuorumJournalManager.connect(
        uri.addresses, uri.journal_id, namespace_info, settings.qjm, tls=settings.tls,
        names=settings.journalnode_names(),
    )


__all__ = [
    "QuorumJournalManager",
    "QuorumOutputStream",
    "RecoveryError",
    "connect_from_settings",
]

"""Simulated JournalNodes and the in-memory transport the writers reach them through.

Real protocol code, simulated machines (HDFS-3077 §7.3; docs/architecture.md §3.1 and §8.2):
each ``SimJournalNode`` is a real ``journalnode.journal.Journal`` over a ``SimJournalStorage``
(``MemoryJournalStorage`` plus two storage-level faults). Killing a JournalNode drops its
``Journal``; restarting it builds a new one over the same storage, which keeps what a disk
keeps after kill -9, or after a machine crash only what was fsynced (a power loss). Writers are
real ``QuorumJournalManager`` / ``AsyncLogger`` objects whose ``JournalChannel`` is a
``SimJournalChannel``: it calls the ``Journal`` directly, in the caller's thread, after asking
the ``FaultInjector`` what goes wrong with this call.

Before delivering a writer's call the network may first run one action of *another* writer
(``SimNetwork.interleave``, set by the runner): that is how the simulator models concurrent
writers without threads (the old writer sends a batch while the new one is halfway through
newEpoch).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from conf import clock
from journalnode.edits_cache import CachedEdits
from journalnode.errors import JournalError, JournalInconsistentError, JournalUnavailableError
from journalnode.journal import Journal, SegmentFetcher
from journalnode.storage import AcceptedRecovery, MemoryJournalStorage
from proto import records
from proto.values import (
    NamespaceInfo,
    PrepareRecoveryResult,
    RemoteEditLog,
    RequestInfo,
    SegmentState,
)
from qjm.sim.faults import FaultInjector, FaultKind, RpcContext, RpcFault
from qjm.sim.trace import Trace, short

T = TypeVar("T")


class JournalNodeCrash(Exception):
    """Raised inside a Journal call where the simulated JournalNode process dies."""


class WriterCrashedError(JournalUnavailableError):
    """The writer's process died: this call (and every later one) never leaves it."""


@dataclass(eq=False)
class Client:
    """Who is calling: a writer (NameNode), a reader, or the fault-free oracle.

    ``crashed`` is set when a writer-crash fault hits one of its calls; from then on nothing
    it sends reaches a JournalNode. ``taking_over`` marks the writer's calls as part of a
    recovery (for the writer-crash probabilities). An ``oracle`` reads storage directly,
    bypassing faults and JournalNode liveness: it is how invariants read "the disk".
    """

    name: str
    is_writer: bool = True
    oracle: bool = False
    crashed: bool = False
    taking_over: bool = False


class SimJournalStorage(MemoryJournalStorage):
    """``MemoryJournalStorage`` that can die in the middle of two writes.

    ``tear_at`` (armed by the channel for one journal() call): the append writes only that
    many bytes of the batch, then the process dies (a torn tail, repaired by the next load).
    ``lose_accept`` (armed for one acceptRecovery): the process dies between its two writes:
    after persisting the accepted recovery, before the downloaded copy replaces the segment
    (the next start-up or prepareRecovery installs it), or, with nothing downloaded, before
    persisting. ``purged_below`` remembers the
    highest purge, so the never-unfinalized invariant can tell a purge from a lost segment.
    """

    def __init__(self) -> None:
        super().__init__()
        self.tear_at: int | None = None
        self.lose_accept = False
        self.purged_below = 0

    def disarm(self) -> None:
        self.tear_at = None
        self.lose_accept = False

    def append(self, segment_txid: int, framed: bytes) -> None:
        if self.tear_at is not None:
            keep, self.tear_at = self.tear_at, None
            super().append(segment_txid, framed[:keep])
            raise JournalNodeCrash(f"died after writing {keep} of {len(framed)} bytes")
        super().append(segment_txid, framed)

    def persist_accepted_recovery(self, segment_txid: int, accepted: AcceptedRecovery) -> None:
        if self.lose_accept:
            self.lose_accept = False
            if (segment_txid, accepted.accepted_in_epoch) in self.staged:
                super().persist_accepted_recovery(segment_txid, accepted)
                raise JournalNodeCrash(
                    f"died after persisting the accepted recovery {accepted.segment_state} of "
                    f"epoch {accepted.accepted_in_epoch}, before installing its segment"
                )
            raise JournalNodeCrash(
                f"died before persisting the accepted recovery {accepted.segment_state} of "
                f"epoch {accepted.accepted_in_epoch}"
            )
        super().persist_accepted_recovery(segment_txid, accepted)

    def purge(self, min_txid_to_keep: int) -> list[str]:
        self.purged_below = max(self.purged_below, min_txid_to_keep)
        return super().purge(min_txid_to_keep)

    def last_txid(self) -> int:
        """The highest txid on this "disk", finalized or in progress (0: none). Reads only:
        a torn tail is not repaired here, the Journal's next scan does that."""
        last = 0
        for start, (data, end) in self.segments.items():
            if end is None:
                result = records.scan(bytes(data[records.HEADER_LEN :]), start)
                end = result.last_txid if result.count else start - 1
            last = max(last, end)
        return last

    def finalized(self) -> list[tuple[int, int]]:
        """``(start, end)`` of every finalized segment on this "disk", in txid order."""
        return [(s, e) for s, (_, e) in sorted(self.segments.items()) if e is not None]


class SimJournalNode:
    """One JournalNode: an address, a durable storage, and a ``Journal`` while it is up."""

    def __init__(self, index: int, journal_id: str) -> None:
        self.index = index
        self.address = f"jn{index}"
        self.journal_id = journal_id
        self.storage = SimJournalStorage()
        self.journal: Journal | None = None
        self.down_steps = 0
        self.incarnation = 0
        self.restart()

    @property
    def up(self) -> bool:
        return self.journal is not None

    def crash(self, down_steps: int, *, power_loss: bool = False) -> list[str]:
        """kill -9: the in-memory Journal is gone, the storage keeps what it wrote; with
        ``power_loss`` the machine died too and the storage keeps only what was fsynced.
        Returns what the power loss lost."""
        self.journal = None
        self.down_steps = down_steps
        self.storage.disarm()
        return self.storage.lose_unsynced() if power_loss else []

    def restart(self) -> None:
        """A new JournalNode process over the same storage (load repairs torn tails)."""
        self.storage.disarm()
        # The run's clock (conf.clock.use_clock), not the machine's: a writer's hold on the
        # journal then lasts the same in every run of a seed.
        self.journal = Journal(
            self.journal_id, self.storage, from_url=self.address, clock=clock.monotonic
        )
        self.incarnation += 1


class SimNetwork:
    """The JournalNodes and the in-memory transport between them and their callers.

    ``deliver`` is the fault-injecting proxy of HDFS-3077 §7.3: every call of every writer
    passes through it, in one thread, in a fixed order (each quorum call goes to jn0, then
    jn1, then jn2), and one ``FaultInjector`` decides its fate.
    """

    def __init__(
        self,
        n_journalnodes: int,
        journal_id: str,
        namespace_info: NamespaceInfo,
        faults: FaultInjector,
        trace: Trace,
    ) -> None:
        self.journal_id = journal_id
        self.namespace_info = namespace_info
        self.faults = faults
        self.trace = trace
        self.nodes = [SimJournalNode(i, journal_id) for i in range(n_journalnodes)]
        self._by_address = {node.address: node for node in self.nodes}
        # Set by the runner: before a writer's call is delivered, maybe run another writer.
        self.interleave: Callable[[Client], None] | None = None
        # Set by the runner: an exception that is no JournalError escaped the protocol code.
        self.on_unexpected: Callable[[str], None] | None = None
        self.clock = 0
        """Counts the JournalNode actions: the order in which the nodes acted."""
        self.partitioned: dict[str, int] = {}
        """address -> steps left: JournalNodes cut off from every writer and reader."""
        self.answers: dict[tuple[str, str], dict[str, int]] = {}
        """(client, key) -> {address: clock at which that node acted} for every keyed call
        whose answer reached its caller (journal batches, newEpoch promises)."""
        self.prepared: dict[str, dict[str, PrepareRecoveryResult]] = {}
        """client -> {address: its prepareRecovery answer} (a writer recovers one segment)."""
        self.journaled: dict[str, dict[str, CachedEdits]] = {}
        """client -> {address: its answer to the client's last getJournaledEdits}."""
        self.proposals: dict[int, list[str]] = {}
        """epoch -> the clients that sent newEpoch(epoch), in order (contested epochs)."""
        self.late: dict[str, str] = {}
        """client -> the JournalNode whose prepareRecovery answer reaches that client only
        after a majority's: the JournalNode acts, the writer decides without its answer."""

    def node(self, address: str) -> SimJournalNode:
        return self._by_address[address]

    def channels(self, client: Client) -> list[SimJournalChannel]:
        return [SimJournalChannel(self, node, client) for node in self.nodes]

    def crash_node(self, node: SimJournalNode, why: str) -> None:
        down = self.faults.down_steps()
        power_loss = self.faults.chance(self.faults.plan.power_loss)
        lost = node.crash(down, power_loss=power_loss)
        kind = "POWER LOSS" if power_loss else "CRASH"
        if power_loss:
            self.faults.count(FaultKind.POWER_LOSS)
        self.trace(f"  {node.address} {kind} ({why}); down for {down} step(s)")
        if lost:
            self.trace(f"  {node.address} lost {'; '.join(lost)}")

    def _unexpected(self, what: str) -> None:
        if self.on_unexpected is not None:
            self.on_unexpected(what)

    def deliver(
        self,
        client: Client,
        node: SimJournalNode,
        what: str,
        rpc: str,
        context: RpcContext,
        act: Callable[[Journal], T],
        *,
        batch_len: int = 0,
        key: str | None = None,
    ) -> T:
        """Deliver one RPC to ``node`` (``act`` is the Journal call) with injected faults.

        When the answer reaches the caller and ``key`` is given, the clock at which the node
        acted is kept in ``answers`` (the no-acked-after-fence invariant compares them).
        """
        if client.crashed:
            raise WriterCrashedError(f"{client.name} has crashed")
        if self.interleave is not None and client.is_writer:
            self.interleave(client)
        prefix = f"{client.name}->{node.address} {what}"
        if node.journal is None:
            self.trace(f"{prefix}: down")
            raise JournalUnavailableError(f"{node.address} is down")
        if node.address in self.partitioned:
            self.trace(f"{prefix}: partitioned")
            raise JournalUnavailableError(f"{node.address} is cut off")
        fault = self.faults.draw_rpc(rpc, context, writer=client.is_writer)
        if fault is RpcFault.WRITER_CRASH_BEFORE:
            client.crashed = True
            self.trace(f"{prefix}: WRITER CRASH before delivery")
            raise WriterCrashedError(f"{client.name} crashed before sending {what}")
        if fault is RpcFault.FAIL_BEFORE:
            self.trace(f"{prefix}: lost before delivery")
            raise JournalUnavailableError(f"injected: {what} to {node.address} lost")
        if fault is RpcFault.JN_CRASH_BEFORE:
            self.crash_node(node, f"before {rpc}")
            self.trace(f"{prefix}: lost, node crashed")
            raise JournalUnavailableError(f"injected: {node.address} crashed before {what}")
        if fault is RpcFault.TORN_APPEND:
            node.storage.tear_at = self.faults.rng.randrange(batch_len) if batch_len else 0
        elif fault is RpcFault.LOST_ACCEPT:
            node.storage.lose_accept = True
        journal = node.journal
        self.clock += 1
        acted_at = self.clock
        try:
            result = act(journal)
        except JournalNodeCrash as crash:
            self.crash_node(node, str(crash))
            self.trace(f"{prefix}: no answer, node crashed mid-call")
            raise JournalUnavailableError(
                f"injected: {node.address} crashed during {what}"
            ) from None
        except JournalInconsistentError as exc:
            # The node refuses, but for a reason no correct history gives: its own records
            # disagree (Hadoop asserts this), so the run has found a bug.
            self.trace(f"{prefix}: INCONSISTENT {short(exc)}")
            self._unexpected(f"{node.address} found its own records inconsistent in {what}: {exc}")
            raise
        except JournalError as exc:
            self.trace(f"{prefix}: {short(exc)}")
            raise
        except Exception as exc:
            # Not a verdict of the Journal: the protocol code itself failed (Hadoop's test
            # greps the output for AssertionError for the same reason, HDFS-3077 §7.3).
            self.trace(f"{prefix}: UNEXPECTED {short(exc)}")
            self._unexpected(f"{node.address} raised {short(exc, 400)} for {what}")
            raise
        finally:
            node.storage.disarm()
        if fault is RpcFault.FAIL_AFTER:
            self.trace(f"{prefix}: acted, answer lost")
            raise JournalUnavailableError(f"injected: answer of {node.address} to {what} lost")
        if fault is RpcFault.JN_CRASH_AFTER:
            self.crash_node(node, f"after {rpc}")
            self.trace(f"{prefix}: acted, node crashed before answering")
            raise JournalUnavailableError(f"injected: {node.address} crashed after {what}")
        if fault is RpcFault.WRITER_CRASH_AFTER:
            client.crashed = True
            self.trace(f"{prefix}: acted, WRITER CRASH before the answer")
            raise WriterCrashedError(f"{client.name} crashed while {what} was answered")
        if rpc == "prepare_recovery" and self.late.get(client.name) == node.address:
            self.trace(f"{prefix}: acted, answer late (the quorum answered first)")
            raise JournalUnavailableError(
                f"injected: {node.address} answered {what} after a majority had"
            )
        self.trace(f"{prefix}: ok{_show(result)}")
        if key is not None:
            self.answers.setdefault((client.name, key), {})[node.address] = acted_at
        return result

    def fetcher(self, accepting: SimJournalNode) -> SegmentFetcher:
        """acceptRecovery's download (HDFS-3077 §2.8 step 3a): reads the source JournalNode
        through its Journal, as its GetSegment servicer would, and can fail."""

        def fetch(from_url: str, journal_id: str, start: int, end: int) -> Iterable[bytes]:
            source = self._by_address.get(from_url)
            if source is None:
                raise JournalUnavailableError(f"no JournalNode at {from_url!r}")
            if source is accepting:
                # The servicer would wait for its own Journal lock: a deadlock in a real JN.
                self._unexpected(f"{accepting.address} was asked to download from itself")
                raise JournalUnavailableError(f"{from_url} asked to download from itself")
            if self.faults.chance(self.faults.plan.fetch_fail):
                self.faults.count(FaultKind.FETCH_FAIL)
                self.trace(f"  {accepting.address} fetch {start}-{end} from {from_url}: FAILED")
                raise JournalUnavailableError(f"injected: download from {from_url} failed")
            if source.journal is None:
                raise JournalUnavailableError(f"{from_url} is down")
            if from_url in self.partitioned:
                raise JournalUnavailableError(f"{from_url} is cut off")
            source.journal.segment_for_reading(self.namespace_info.cluster_id, start, end)
            data = b"".join(source.storage.read_segment(start, end))
            self.trace(f"  {accepting.address} fetched {start}-{end} from {from_url}")
            return [data]

        return fetch


def batch_key(first_txid: int) -> str:
    """``SimNetwork.answers`` key of a writer's batch (a writer sends each batch once)."""
    return f"journal:{first_txid}"


def new_epoch_key(epoch: int) -> str:
    """``SimNetwork.answers`` key of a writer's newEpoch promise."""
    return f"newEpoch:{epoch}"


def _show(result: Any) -> str:
    """A short, deterministic rendering of an RPC's result for the trace."""
    if result is None:
        return ""
    if isinstance(result, PrepareRecoveryResult):
        return (
            f" {result.segment_state or '[none]'} accepted={result.accepted_in_epoch} "
            f"lwe={result.last_writer_epoch} committed={result.last_committed_txid}"
        )
    if isinstance(result, list):
        return " " + ",".join(str(r) for r in result)
    return f" {result}"


class SimJournalChannel:
    """A ``qjm.channel.JournalChannel`` that calls a simulated JournalNode's Journal directly.

    One per (client, JournalNode), like one IPC proxy per logger. Every call goes through
    ``SimNetwork.deliver``. An oracle client's reads bypass faults and liveness and read the
    JournalNode's storage (the invariants' fault-free read path).
    """

    def __init__(self, net: SimNetwork, node: SimJournalNode, client: Client) -> None:
        self.net = net
        self.node = node
        self.client = client
        self.address = node.address

    def _context(self, default: RpcContext = RpcContext.OTHER) -> RpcContext:
        return RpcContext.RECOVERY if self.client.taking_over else default

    def _deliver(
        self,
        what: str,
        rpc: str,
        act: Callable[[Journal], T],
        context: RpcContext | None = None,
        batch_len: int = 0,
        key: str | None = None,
    ) -> T:
        return self.net.deliver(
            self.client,
            self.node,
            what,
            rpc,
            context or self._context(),
            act,
            batch_len=batch_len,
            key=key,
        )

    def is_formatted(self, journal_id: str, timeout: float) -> tuple[bool, NamespaceInfo | None]:
        def act(j: Journal) -> tuple[bool, NamespaceInfo | None]:
            return j.is_formatted(), j.namespace_info

        return self._deliver("isFormatted", "is_formatted", act)

    def format(self, journal_id: str, ns: NamespaceInfo, force: bool, timeout: float) -> None:
        self._deliver("format", "format", lambda j: j.format(ns, force=force))

    def get_journal_state(
        self, journal_id: str, cluster_id: str, timeout: float
    ) -> tuple[int, str]:
        return self._deliver(
            "getJournalState", "get_journal_state", lambda j: j.get_journal_state(cluster_id)
        )

    def new_epoch(
        self, journal_id: str, ns: NamespaceInfo, epoch: int, timeout: float
    ) -> int | None:
        proposers = self.net.proposals.setdefault(epoch, [])
        if self.client.name not in proposers:
            proposers.append(self.client.name)
        return self._deliver(
            f"newEpoch({epoch})",
            "new_epoch",
            lambda j: j.new_epoch(ns, epoch),
            key=new_epoch_key(epoch),
        )

    def start_log_segment(self, req: RequestInfo, txid: int, timeout: float) -> None:
        self._deliver(
            f"startLogSegment({txid}) e{req.epoch}",
            "start_log_segment",
            lambda j: j.start_log_segment(req, txid),
        )

    def journal(
        self,
        req: RequestInfo,
        segment_txid: int,
        first_txid: int,
        num_txns: int,
        framed: bytes,
        timeout: float,
    ) -> None:
        last = first_txid + num_txns - 1
        context = RpcContext.FIRST_BATCH if first_txid == segment_txid else RpcContext.BATCH
        self._deliver(
            f"journal({first_txid}-{last}) e{req.epoch}",
            "journal",
            lambda j: j.journal(
                req,
                segment_txid=segment_txid,
                first_txid=first_txid,
                num_txns=num_txns,
                framed=framed,
            ),
            context,
            batch_len=len(framed),
            key=batch_key(first_txid),
        )

    def heartbeat(self, req: RequestInfo, timeout: float) -> None:
        self._deliver(f"heartbeat e{req.epoch}", "heartbeat", lambda j: j.heartbeat(req))

    def finalize_log_segment(
        self, req: RequestInfo, start: int, end: int, timeout: float, md5: bytes = b""
    ) -> None:
        self._deliver(
            f"finalizeLogSegment({start}-{end}) e{req.epoch}",
            "finalize_log_segment",
            lambda j: j.finalize_log_segment(req, start, end, md5),
        )

    def purge_logs(self, req: RequestInfo, min_txid_to_keep: int, timeout: float) -> None:
        self._deliver(
            f"purgeLogs({min_txid_to_keep}) e{req.epoch}",
            "purge_logs",
            lambda j: j.purge_logs(req, min_txid_to_keep),
        )

    def get_edit_log_manifest(
        self,
        journal_id: str,
        cluster_id: str,
        since_txid: int,
        in_progress_ok: bool,
        timeout: float,
    ) -> tuple[list[RemoteEditLog], int]:
        if self.client.oracle:
            storage = self.node.storage
            logs = [
                RemoteEditLog(s, e, False, storage.digests.get(s, b""))
                for s, e in storage.finalized()
                if e >= since_txid
            ]
            return logs, storage.committed_txid

        def act(j: Journal) -> tuple[list[RemoteEditLog], int]:
            logs = j.get_edit_log_manifest(cluster_id, since_txid, in_progress_ok=in_progress_ok)
            return logs, j.committed_txid

        return self._deliver(f"getEditLogManifest({since_txid})", "get_edit_log_manifest", act)

    def get_journaled_edits(
        self, journal_id: str, cluster_id: str, since_txid: int, max_txns: int, timeout: float
    ) -> CachedEdits:
        result = self._deliver(
            f"getJournaledEdits({since_txid})",
            "get_journaled_edits",
            lambda j: j.get_journaled_edits(cluster_id, since_txid, max_txns),
        )
        self.net.journaled.setdefault(self.client.name, {})[self.address] = result
        return result

    def prepare_recovery(
        self, req: RequestInfo, segment_txid: int, timeout: float
    ) -> PrepareRecoveryResult:
        result = self._deliver(
            f"prepareRecovery({segment_txid}) e{req.epoch}",
            "prepare_recovery",
            lambda j: j.prepare_recovery(req, segment_txid),
        )
        self.net.prepared.setdefault(self.client.name, {})[self.address] = result
        return result

    def accept_recovery(
        self, req: RequestInfo, state: SegmentState, from_url: str, timeout: float
    ) -> None:
        fetch = self.net.fetcher(self.node)
        self._deliver(
            f"acceptRecovery({state} from {from_url}) e{req.epoch}",
            "accept_recovery",
            lambda j: j.accept_recovery(req, state, from_url, fetch),
        )

    def get_segment(
        self, journal_id: str, cluster_id: str, start: int, end: int | None, timeout: float
    ) -> Iterator[bytes]:
        if self.client.oracle:
            yield from self.node.storage.read_segment(start, end)
            return

        def act(j: Journal) -> bytes:
            j.segment_for_reading(cluster_id, start, end)
            return b"".join(j.storage.read_segment(start, end))

        data = self._deliver(f"getSegment({start})", "get_segment", act)
        faults = self.net.faults
        if faults.chance(faults.plan.read_fail):
            faults.count(FaultKind.READ_FAIL)
            # Half fail before the first byte, half in the middle of the stream.
            mid_stream = faults.rng.random() < 0.5 and len(data) > records.HEADER_LEN + 1
            cut = faults.rng.randrange(records.HEADER_LEN, len(data)) if mid_stream else 0
            self.net.trace(
                f"  {self.client.name}<-{self.address} getSegment({start}) FAILED after {cut} bytes"
            )
            if cut:
                yield data[:cut]
            raise JournalUnavailableError(
                f"injected: getSegment({start}) from {self.address} broke"
            )
        yield data

    def close(self) -> None:
        pass

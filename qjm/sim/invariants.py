"""The invariants the simulator checks after every step (docs/protocol.md §9, HDFS-3077 §2.3-§2.8).

``History`` remembers what the run promised to its writers (epochs obtained, txids
acknowledged) and what the JournalNodes' disks held, and raises ``InvariantViolation`` naming
the first invariant that broke:

``epochs-unique``
    No two writers ever completed ``create_new_unique_epoch`` with the same epoch (HDFS-3077
    §2.3, §2.5: epochs are unique).
``acked-durable``
    Every txid acknowledged to a writer of epoch e (``QuorumOutputStream.flush`` returned) is,
    once a writer of a later epoch has recovered, in the recovered log with the same bytes, and
    not past its end (HDFS-3077 §2.6 postcondition 1, §2.8: recovery keeps every committed
    transaction). A txid is acknowledged at most once, with one content.
    A recovery that *decides* to stop below an acknowledged txid breaks it too, even when the
    QJM's sanity check (``RecoveryError``) then refuses to carry the decision out.
``finalized-identical``
    Finalized segments with the same first txid hold identical records on every JournalNode,
    for the whole run (HDFS-3077 §2.8: one length and one content for every finalized copy).
``never-unfinalized``
    Once a JournalNode holds a finalized segment (start, end) it never again holds that start
    in progress or with another end, unless it purged it (HDFS-3077 §2.7, invariant 1).
``no-acked-after-fence``
    When a writer of epoch e is told a batch is acknowledged, every epoch e' > e whose newEpoch
    had already succeeded on a quorum Q' has a JournalNode in Q' that acknowledged the batch
    before it promised e'. So a fenced writer gets no ack for a batch the fencing quorum did not
    see, and the newer writer learns of the batch's segment from newEpoch (HDFS-3077 §2.3, §2.8
    step 1).
``recovery-sane``
    The writer's own sanity checks of a recovery decision (``qjm.errors.RecoveryError``, HDFS-3077
    §2.9; an AssertionError in Hadoop) never fire: they mean the decision would lose a
    committed txid or contradict a finalized copy. (When the simulator's own record shows the
    decision would drop an acknowledged txid, it reports acked-durable instead.)
``no-unexpected-error``
    The protocol code raises only its own errors: anything else (an assertion, a KeyError) is a
    bug, as Hadoop's randomized test greps its output for AssertionError (HDFS-3077 §7.3).
``recoverable``
    At the end of the run, with every JournalNode up and no faults, a new writer recovers.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from proto.records import RecordError
from qjm.sim.cluster import SimJournalNode

EPOCHS_UNIQUE = "epochs-unique"
ACKED_DURABLE = "acked-durable"
FINALIZED_IDENTICAL = "finalized-identical"
NEVER_UNFINALIZED = "never-unfinalized"
NO_ACKED_AFTER_FENCE = "no-acked-after-fence"
RECOVERY_SANE = "recovery-sane"
NO_UNEXPECTED_ERROR = "no-unexpected-error"
RECOVERABLE = "recoverable"

INVARIANTS = (
    EPOCHS_UNIQUE,
    ACKED_DURABLE,
    FINALIZED_IDENTICAL,
    NEVER_UNFINALIZED,
    NO_ACKED_AFTER_FENCE,
    RECOVERY_SANE,
    NO_UNEXPECTED_ERROR,
    RECOVERABLE,
)


class InvariantViolation(Exception):
    """An invariant broke: ``invariant`` is one of ``INVARIANTS``.

    ``refused`` says the protocol's own check caught the step that broke it and refused it
    (a recovery's sanity check, Hadoop's AssertionError): nothing wrong was written, and the
    cluster stops instead of going on with a bad log. A run that ends this way still fails,
    but it is better than one whose damage went through unseen (``qjm.sim.mutants``)."""

    def __init__(self, invariant: str, message: str, *, refused: bool = False) -> None:
        super().__init__(f"{invariant}: {message}")
        self.invariant = invariant
        self.message = message
        self.refused = refused


@dataclass(frozen=True, slots=True)
class Ack:
    """One acknowledged txid: who wrote it, in which epoch, with which payload."""

    writer: str
    epoch: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class CompletedEpoch:
    """A successful ``create_new_unique_epoch``: the quorum that promised it and when each
    member promised (``SimNetwork.clock``)."""

    writer: str
    epoch: int
    promised_at: Mapping[str, int]


@dataclass(slots=True)
class History:
    """What the run has promised and what the disks have shown, checked as it grows."""

    acked: dict[int, Ack] = field(default_factory=dict)
    epochs: list[CompletedEpoch] = field(default_factory=list)
    purge_floor: int = 0
    """Highest min_txid_to_keep any writer sent: txids below it may be purged anywhere."""
    tailed: dict[int, Ack] = field(default_factory=dict)
    """Txids a reader got from the in-progress caches (GetJournaledEdits), with the writer
    epoch the JournalNodes held them in: a standby applies them, so every later recovery
    must keep them exactly as read, like acknowledged txids."""
    _verified: set[int] = field(default_factory=set)
    """Acked txids already found in a recovered (finalized, so immutable) log."""
    _by_epoch: dict[int, str] = field(default_factory=dict)
    _canonical: dict[int, tuple[int, bytes, str]] = field(default_factory=dict)
    _checked: dict[tuple[int, int], tuple[int, bytearray, int]] = field(default_factory=dict)
    _finalized_seen: dict[int, dict[int, int]] = field(default_factory=dict)

    # ------------------------------------------------------------------ epochs-unique

    def epoch_completed(self, completed: CompletedEpoch) -> None:
        other = self._by_epoch.get(completed.epoch)
        if other is not None:
            raise InvariantViolation(
                EPOCHS_UNIQUE,
                f"{completed.writer} and {other} both completed newEpoch({completed.epoch})",
            )
        self._by_epoch[completed.epoch] = completed.writer
        self.epochs.append(completed)

    # ------------------------------------------------------------------ acks

    def batch_acked(
        self,
        writer: str,
        epoch: int,
        first_txid: int,
        payloads: Sequence[bytes],
        ackers: Mapping[str, int],
    ) -> None:
        """Record the txids of a batch whose flush returned; ``ackers`` maps each JournalNode
        whose acknowledgement reached the writer to the clock at which it acted."""
        last = first_txid + len(payloads) - 1
        for completed in self.epochs:
            if completed.epoch <= epoch:
                continue
            saw = [
                a
                for a in sorted(completed.promised_at)
                if a in ackers and ackers[a] < completed.promised_at[a]
            ]
            if not saw:
                raise InvariantViolation(
                    NO_ACKED_AFTER_FENCE,
                    f"{writer} (epoch {epoch}) was acknowledged batch {first_txid}-{last} by "
                    f"{sorted(ackers)} after {completed.writer} completed newEpoch("
                    f"{completed.epoch}) on {sorted(completed.promised_at)}, none of which had "
                    "acknowledged the batch before promising",
                )
        for txid, payload in enumerate(payloads, first_txid):
            ack = Ack(writer, epoch, payload)
            read = self.tailed.get(txid)
            if read is not None and read.payload != payload:
                raise InvariantViolation(
                    ACKED_DURABLE,
                    f"txid {txid} acknowledged to {writer} (epoch {epoch}) as {payload!r} was "
                    f"read in progress as {read.payload!r} (epoch {read.epoch})",
                )
            known = self.acked.get(txid)
            if known is not None and known != ack:
                raise InvariantViolation(
                    ACKED_DURABLE,
                    f"txid {txid} acknowledged twice: to {known.writer} (epoch {known.epoch}) "
                    f"and to {writer} (epoch {epoch})",
                )
            self.acked[txid] = ack

    # ------------------------------------------------------------------ acked-durable

    def unverified_since(self, epoch: int) -> int | None:
        """Where a recovery in ``epoch`` must start reading to check acked-durable: the
        lowest txid acknowledged to an earlier epoch, at or above the purge floor, not yet
        found in a recovered log (a finalized segment never changes: never-unfinalized and
        finalized-identical check that). None when there is nothing to read."""
        for txid in sorted(self.acked.keys() | self.tailed.keys()):
            if (
                txid >= self.purge_floor
                and txid not in self._verified
                and any(a.epoch < epoch for a in self._promised(txid))
            ):
                return txid
        return None

    def _promised(self, txid: int) -> list[Ack]:
        """What the run told someone about ``txid``: its ack and its in-progress read."""
        return [a for a in (self.acked.get(txid), self.tailed.get(txid)) if a is not None]

    def check_recovered_log(
        self, writer: str, epoch: int, recovered_end: int, log: Mapping[int, bytes]
    ) -> None:
        """After ``writer`` (epoch ``epoch``) recovered the log up to ``recovered_end``: every
        txid acknowledged to an earlier epoch, at or above the purge floor, is in ``log``
        (txid -> payload, the finalized log read fault-free) with its bytes, and is not past
        ``recovered_end``. Acks of later epochs (writers that took over meanwhile, in an
        interleaving) are not this recovery's business. Txids read in progress are held to
        the same rule, with the writer epoch they were read in."""
        for txid in sorted(self.acked.keys() | self.tailed.keys()):
            ack = min(self._promised(txid), key=lambda a: a.epoch)
            if ack.epoch >= epoch or txid < self.purge_floor:
                continue
            if txid > recovered_end:
                raise InvariantViolation(
                    ACKED_DURABLE,
                    f"{writer} (epoch {epoch}) recovered the log only up to txid "
                    f"{recovered_end}, but txid {txid} was acknowledged to {ack.writer} "
                    f"(epoch {ack.epoch})",
                )
            if txid in self._verified:
                continue
            got = log.get(txid)
            if got is None:
                raise InvariantViolation(
                    ACKED_DURABLE,
                    f"txid {txid}, acknowledged to {ack.writer} (epoch {ack.epoch}), is missing "
                    f"from the log recovered by {writer} (epoch {epoch}, end {recovered_end})",
                )
            if got != ack.payload:
                raise InvariantViolation(
                    ACKED_DURABLE,
                    f"txid {txid} was acknowledged to {ack.writer} with {ack.payload!r} but the "
                    f"log recovered by {writer} (epoch {epoch}) holds {got!r}",
                )
            self._verified.add(txid)

    def acked_after(self, end: int, *, before_epoch: int) -> tuple[int, Ack] | None:
        """The lowest txid past ``end`` acknowledged to an epoch below ``before_epoch`` (and at
        or above the purge floor), if any: what a recovery that stops at ``end`` would drop."""
        for txid in sorted(self.acked):
            ack = self.acked[txid]
            if txid > end and txid >= self.purge_floor and ack.epoch < before_epoch:
                return txid, ack
        return None

    def check_read(self, reader: str, log: Mapping[int, bytes]) -> None:
        """What a reader read agrees with every ack and every earlier in-progress read."""
        for txid in sorted(log):
            for ack in self._promised(txid):
                if log[txid] != ack.payload:
                    what = "read in progress" if ack is self.tailed.get(txid) else "acknowledged"
                    raise InvariantViolation(
                        ACKED_DURABLE,
                        f"{reader} read txid {txid} as {log[txid]!r} but it was {what} "
                        f"(epoch {ack.epoch}) as {ack.payload!r}",
                    )

    def check_tailed(self, reader: str, epoch: int, log: Mapping[int, bytes]) -> None:
        """What a reader got from the in-progress caches (held in writer epoch ``epoch``)
        agrees with every ack and with what any reader got before for the same txid; it is
        remembered and held to acked-durable from then on."""
        self.check_read(reader, log)
        for txid in sorted(log):
            before = self.tailed.get(txid)
            if before is not None and before.payload != log[txid]:
                raise InvariantViolation(
                    ACKED_DURABLE,
                    f"{reader} read in-progress txid {txid} as {log[txid]!r} (epoch {epoch}), "
                    f"an earlier read returned {before.payload!r} (epoch {before.epoch})",
                )
            if before is None or epoch < before.epoch:
                self.tailed[txid] = Ack(reader, epoch, log[txid])

    def check_tailed_kept(self, who: str, end: int, log: Mapping[int, bytes]) -> None:
        """After the final recovery (log through ``end``): every txid read in progress, at or
        above the purge floor, is in the log with the bytes the reader got."""
        for txid in sorted(self.tailed):
            if txid < self.purge_floor:
                continue
            read = self.tailed[txid].payload
            if txid > end or log.get(txid) != read:
                raise InvariantViolation(
                    ACKED_DURABLE,
                    f"txid {txid} was read in progress as {read!r} but the log recovered by "
                    f"{who} (end {end}) holds {log.get(txid)!r}",
                )

    # ------------------------------------------------------------------ the disks

    def check_disks(self, nodes: Sequence[SimJournalNode]) -> None:
        """finalized-identical and never-unfinalized over every JournalNode's storage (up or
        down: a disk survives its process)."""
        for node in nodes:
            storage = node.storage
            seen = self._finalized_seen.setdefault(node.index, {})
            for start in sorted(seen):
                end = seen[start]
                entry = storage.segments.get(start)
                if entry is None:
                    if end < storage.purged_below:
                        del seen[start]
                        continue
                    raise InvariantViolation(
                        NEVER_UNFINALIZED,
                        f"{node.address} held finalized segment {start}-{end}, which has "
                        f"vanished without a purge (purged below {storage.purged_below})",
                    )
                if entry[1] != end:
                    now = "in progress" if entry[1] is None else f"finalized at {entry[1]}"
                    raise InvariantViolation(
                        NEVER_UNFINALIZED,
                        f"{node.address} held finalized segment {start}-{end}; it is now {now}",
                    )
            for start, end in storage.finalized():
                seen[start] = end
                self._check_identical(node, start, end)

    def _check_identical(self, node: SimJournalNode, start: int, end: int) -> None:
        data = node.storage.segments[start][0]
        key = (node.index, start)
        checked = self._checked.get(key)
        # A finalized segment never changes, so each copy is hashed once; the cache holds the
        # buffer itself, so a replaced buffer (or a grown one) is noticed and hashed again.
        if (
            checked is not None
            and checked[0] == end
            and checked[1] is data
            and checked[2] == len(data)
        ):
            return
        self._checked[key] = (end, data, len(data))
        try:
            digest = hashlib.sha256(b"".join(node.storage.read_segment(start, end))).digest()
        except RecordError as exc:
            raise InvariantViolation(
                FINALIZED_IDENTICAL,
                f"finalized segment {start}-{end} on {node.address} is unreadable: {exc}",
            ) from None
        canonical = self._canonical.get(start)
        if canonical is None:
            self._canonical[start] = (end, digest, node.address)
            return
        c_end, c_digest, c_address = canonical
        if c_end != end:
            raise InvariantViolation(
                FINALIZED_IDENTICAL,
                f"segment {start} was finalized at txid {c_end} on {c_address} but at txid {end} "
                f"on {node.address}",
            )
        if c_digest != digest:
            raise InvariantViolation(
                FINALIZED_IDENTICAL,
                f"finalized segment {start}-{end} holds other records on {node.address} than on "
                f"{c_address}",
            )
